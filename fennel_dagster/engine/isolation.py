"""Poison messages: a batch that raises is bisected until the messages that raise alone are
found; each becomes an error record and the rest of the batch is processed and committed. A
batch message (many rows, ``ops.batches``) that raises alone is split into its rows, so only
the rows that raise are set aside.

Why bisect rather than stop: an operator that raises on one message would raise again on
every retry (``process`` is deterministic), so the partition would stop — or loop — on one
hostile event while the good rows behind it wait forever. Why not row by row at once: a
batch is thousands of messages and a poison one is rare; halving costs ``log2(n)`` extra
passes over the failing half only. Each half sees the state the halves before it wrote, so
the result equals processing the good messages in order; recovery replays through the same
function and reaches the same state.

Nor is a service that does not answer (``ServiceUnavailable``: a schema registry): the
batch is retried whole once it is back. Nor a ``FennelError`` (shipped code that does not
load, an operator the executor does not support): it fails every message alike; so does a
batch in which no message succeeds on its own (at least ``JOB_FAULT_MIN`` of them). Those
are job faults: the caller stops the partition and records why.
"""

from __future__ import annotations

from collections.abc import Callable

from fennel_dagster.engine.failures import PermanentJobError, ServiceUnavailable
from fennel_dagster.engine.messages import ErrorRecord, InMessage, Iteration, newest
from fennel_dagster.errors import FennelError
from fennel_dagster.ops import batches
from fennel_dagster.ops.state import OverlayReader, StateReader, WriteBatch

Process = Callable[[list[InMessage], StateReader], Iteration]
Poison = Callable[[InMessage, Exception], ErrorRecord]
JOB_FAULT_MIN = 8


def process_isolating(
    process: Process, msgs: list[InMessage], state: StateReader, poison: Poison, job: str
) -> Iteration:
    """``process(msgs, state)``, with the messages that raise alone set aside as errors."""
    try:
        return process(msgs, state)
    except ServiceUnavailable:
        raise
    except FennelError as e:
        raise PermanentJobError(_fault(job, msgs, e)) from e
    except Exception as first:  # noqa: BLE001 - classified below
        it, good, tried = _bisect(process, msgs, state, poison)
        if good == 0 and tried >= JOB_FAULT_MIN:
            raise PermanentJobError(
                f"{_fault(job, msgs, first)}; each of the {tried} messages fails on its own, "
                "so this is the job, not its input"
            ) from first
        return it


def _bisect(
    process: Process, msgs: list[InMessage], state: StateReader, poison: Poison
) -> tuple[Iteration, int, int]:
    """The merged iteration of ``msgs`` without its poison messages; how many were good, of
    how many tried alone or in groups (a batch message's rows count one each)."""
    try:
        return process(msgs, state), len(msgs), len(msgs)
    except FennelError:  # ServiceUnavailable among them: the caller's to handle
        raise
    except Exception as e:  # noqa: BLE001 - a bad row, or a half holding one
        if len(msgs) == 1:
            rows = _rows(msgs[0])
            if len(rows) <= 1:
                return Iteration(writes=WriteBatch(), errors=[poison(msgs[0], e)]), 0, 1
            return _bisect(process, rows, state, poison)
    mid = len(msgs) // 2
    left, good_left, tried_left = _bisect(process, msgs[:mid], state, poison)
    seen = OverlayReader(state, left.writes) if left.writes is not None else state
    right, good_right, tried_right = _bisect(process, msgs[mid:], seen, poison)
    return _merge(left, right), good_left + good_right, tried_left + tried_right


def _rows(m: InMessage) -> list[InMessage]:
    """A batch message as one message per row (same place), so one bad row of a batch is set
    aside, not the batch; any other message as itself."""
    if not batches.is_batch(m.value):
        return [m]
    try:
        return [m._replace(value=v) for v in batches.split(m.value or b"")]
    except batches.BatchFormatError:
        return [m]


def poison_record(job: str, dataset: str, m: InMessage, e: Exception) -> ErrorRecord:
    """A message the job's operators raise on, alone: an error row, not a stop."""
    return ErrorRecord(dataset, "process", (
        f"job {job} of {dataset} raised {type(e).__name__}: {e} on this message "
        f"({m.topic}[{m.partition}]@{m.offset}); it was set aside and the rest of the "
        "batch went on"
    ), m.topic, m.partition, m.offset, m.value or b"", job)  # fmt: skip


def _merge(a: Iteration, b: Iteration) -> Iteration:
    writes = None
    if a.writes is not None or b.writes is not None:
        writes = WriteBatch()
        for part in (a.writes, b.writes):
            if part is not None:
                writes.update(part)
    return Iteration(
        a.outputs + b.outputs,
        a.errors + b.errors,
        a.late + b.late,
        writes,
        newest(a.newest_event_us, b.newest_event_us),
    )


def _fault(job: str, msgs: list[InMessage], e: Exception) -> str:
    first, last = msgs[0], msgs[-1]
    return (
        f"job {job} failed on {first.topic}[{first.partition}] offsets "
        f"{first.offset}..{last.offset}: {type(e).__name__}: {e}"
    )
