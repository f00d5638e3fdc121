"""The runner's guards against one bad event, as pure logic (no services): bisecting a batch
around poison messages, telling restart loops from outages, and error records that fit.

The same guards on the real broker: ``test_poison.py``.
"""

from __future__ import annotations

import hashlib
import json
import time

import pandas as pd
import psycopg
import pytest
from confluent_kafka import KafkaError, KafkaException

from fennel_dagster import commit_spec
from fennel_dagster.commit.compiler import compile_blueprints, jobs_of
from fennel_dagster.commit.graph import EntityGraph
from fennel_dagster.engine.error_records import decode_error, encode_error
from fennel_dagster.engine.failures import PermanentJobError, RecoveryError
from fennel_dagster.engine.isolation import JOB_FAULT_MIN, poison_record, process_isolating
from fennel_dagster.engine.jobs.factory import build_job
from fennel_dagster.engine.messages import ErrorRecord, InMessage, Iteration
from fennel_dagster.engine.restarts import RestartWatch, transient
from fennel_dagster.ops import batches
from fennel_dagster.ops.batches import rows_of
from fennel_dagster.ops.limits import ERROR_RECORD_MAX_BYTES
from fennel_dagster.ops.state import MemoryState, StateReader, WriteBatch
from fennel_dagster.wire import plan
from fennel_dagster.wire.usercode import UserCodeError
from tests.engine.repo import T0, graph

# --------------------------------------------------------------------------- bisection


def _pipeline() -> plan.PipelineJobSpec:
    jobs = jobs_of(compile_blueprints(EntityGraph.build(commit_spec("iso", graph("raw"), []))))
    return next(j for j in jobs if isinstance(j, plan.PipelineJobSpec))


def _rows(n: int) -> list[InMessage]:
    """Rows for the job's aggregate stage (its repartition topic): they build state."""
    job = _pipeline()
    assert job.repartition is not None
    topic = job.repartition.topic
    out = []
    for i in range(n):
        row = {"uid": i % 3, "amount": float(i), "ts": (T0.replace(minute=i % 60)).isoformat()}
        out.append(InMessage(topic, 0, i, None, json.dumps(row).encode()))
    return out


def _run(msgs: list[InMessage]) -> tuple[Iteration, MemoryState]:
    job = _pipeline()
    logic = build_job(job, lambda t: 1)
    state = MemoryState()
    it = process_isolating(
        logic.process, msgs, state, lambda m, e: poison_record(job.name, "Spend", m, e), job.name
    )
    if it.writes is not None:
        state.apply(it.writes)
    return it, state


def test_a_poison_message_is_set_aside_and_the_batch_equals_the_batch_without_it() -> None:
    """Bisecting around a message the operators raise on gives the very outputs and state
    of the same batch without it: each half sees what the halves before it wrote."""
    good = _rows(40)
    topic = good[0].topic
    bad = InMessage(topic, 0, 999, None, json.dumps({"uid": 2**70, "amount": 1.0,
                                                     "ts": T0.isoformat()}).encode())  # fmt: skip
    with_poison, state_p = _run(good[:17] + [bad] + good[17:])
    clean, state_c = _run(good)
    assert _out_rows(with_poison) == _out_rows(clean)
    assert state_c._data and state_p._data == state_c._data  # noqa: SLF001 - byte for byte
    (err,) = with_poison.errors
    assert err.stage == "process" and err.offset == 999 and err.payload == bad.value
    assert "OverflowError" in err.reason and "set aside" in err.reason


def _out_rows(it: Iteration) -> list[tuple[int, dict[str, object]]]:
    """The rows sent, partition by partition in the order each partition gets them (how they
    are cut into batch messages may differ: a bisected batch sends a message per half)."""
    rows = [(o.partition, row) for o in it.outputs for row in rows_of(o.value)]
    return sorted(rows, key=lambda r: r[0])


def test_a_poison_row_inside_a_batch_message_is_set_aside_alone() -> None:
    """A batch message (many rows) whose one row the operators raise on: the message is
    split into its rows, only that row goes to the error topic, the others go on as if the
    batch never held it."""
    good = _rows(40)
    topic = good[0].topic
    fields = _pipeline().repartition.schema  # type: ignore[union-attr]
    records = [json.loads(m.value or b"") for m in good]
    poisoned = [*records[:17], {"uid": 2**70, "amount": 1.0, "ts": T0.isoformat()}, *records[17:]]
    frame = pd.DataFrame({f.name: pd.Series([r.get(f.name) for r in poisoned], dtype=object)
                          for f in fields})  # fmt: skip
    one = InMessage(topic, 0, 500, None, batches.encode(frame, fields))
    with_poison, state_p = _run([one])
    clean, state_c = _run(good)
    assert _out_rows(with_poison) == _out_rows(clean)
    assert state_c._data and state_p._data == state_c._data  # noqa: SLF001 - byte for byte
    (err,) = with_poison.errors
    assert err.offset == 500 and "set aside" in err.reason
    assert batches.records(err.payload)[0]["uid"] == 2**70  # the row, as a batch of one


def _raising(on: set[int], exc: Exception | None = None) -> object:
    def process(msgs: list[InMessage], state: StateReader) -> Iteration:
        hit = [m.offset for m in msgs if m.offset in on]
        if hit:
            raise exc or ValueError(f"bad offset {hit[0]}")
        wb = WriteBatch()
        for m in msgs:
            wb.put("seen", str(m.offset).encode(), b"1")
        return Iteration(writes=wb)

    return process


def _msgs(n: int) -> list[InMessage]:
    return [InMessage("t", 0, i, None, b"{}") for i in range(n)]


def _poison(m: InMessage, e: Exception) -> ErrorRecord:
    return ErrorRecord("D", "process", str(e), m.topic, m.partition, m.offset, b"")


def test_several_poison_messages_are_each_found_and_every_other_message_is_kept() -> None:
    it = process_isolating(_raising({3, 4, 57}), _msgs(64), MemoryState(), _poison, "j")  # type: ignore[arg-type]
    assert sorted(e.offset for e in it.errors) == [3, 4, 57]
    assert it.writes is not None
    assert {int(k) for _, k, _ in it.writes.items()} == set(range(64)) - {3, 4, 57}


def test_shipped_code_that_does_not_load_is_a_job_fault_not_a_bad_row() -> None:
    fail = _raising(set(range(10)), UserCodeError("shipped code does not compile"))
    with pytest.raises(PermanentJobError, match="does not compile"):
        process_isolating(fail, _msgs(10), MemoryState(), _poison, "j")  # type: ignore[arg-type]


def test_a_batch_in_which_every_message_fails_alone_is_a_job_fault() -> None:
    every = _raising(set(range(JOB_FAULT_MIN)))
    with pytest.raises(PermanentJobError, match="each of the 8 messages fails on its own"):
        process_isolating(every, _msgs(JOB_FAULT_MIN), MemoryState(), _poison, "j")  # type: ignore[arg-type]
    one = process_isolating(_raising({0}), _msgs(1), MemoryState(), _poison, "j")  # type: ignore[arg-type]
    assert [e.offset for e in one.errors] == [0]  # one bad message alone is a bad row


# --------------------------------------------------------------------------- restart loops


def test_the_same_failure_five_times_in_quick_succession_is_a_restart_loop() -> None:
    watch = RestartWatch("job j partition 0", limit=5)
    for _ in range(4):
        watch.started()
        watch.failed(KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)))
    watch.started()
    with pytest.raises(PermanentJobError, match="restarted 5 times into the same failure"):
        watch.failed(KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)))


def test_outages_are_waited_out_and_different_or_slow_failures_are_not_a_loop() -> None:
    watch = RestartWatch("j", limit=3, quick_s=0.05)
    outage = [KafkaException(KafkaError(KafkaError._ALL_BROKERS_DOWN)),
              psycopg.OperationalError("connection refused"), RecoveryError("no topic yet"),
              ConnectionResetError("reset")]  # fmt: skip
    for e in outage * 5:
        assert transient(e)
        watch.started()
        watch.failed(e)  # never raises
    for i in range(6):  # each failure different: not one loop
        watch.started()
        watch.failed(ValueError(f"failure {i}"))
    for _ in range(4):  # the same failure, but each attempt ran a while first
        watch.started()
        time.sleep(0.06)
        watch.failed(ValueError("same"))


# --------------------------------------------------------------------------- error records


@pytest.mark.parametrize("size", [900_000, 1_500_000, 5_000_000])
def test_an_error_record_always_fits_and_keeps_how_to_find_the_payload(size: int) -> None:
    payload = b"\x00\xff" * (size // 2)
    err = ErrorRecord("Txn", "parse", "r" * 10_000, "raw", 3, 42, payload, "source",
                      {"note": "x" * size})  # fmt: skip
    raw = encode_error(err)
    assert len(raw) <= ERROR_RECORD_MAX_BYTES
    doc = decode_error(raw)
    assert doc["payload_truncated"] and doc["payload_bytes"] == len(payload)
    assert doc["payload_sha256"] == hashlib.sha256(payload).hexdigest()
    assert payload.startswith(doc["payload"]) and len(doc["payload"]) > 500_000
    assert doc["row"] is None and doc["row_dropped"]
    assert doc["source"] == {"topic": "raw", "partition": 3, "offset": 42}
    assert doc["reason"].startswith("rrr") and len(doc["reason"]) < 4100


def test_a_small_error_record_is_kept_whole() -> None:
    err = ErrorRecord("Txn", "schema", "why", "raw", 0, 1, b'{"a": 1}', "w", {"a": 1})
    doc = decode_error(encode_error(err))
    assert doc["payload"] == b'{"a": 1}' and doc["row"] == {"a": 1}
    assert "payload_truncated" not in doc


def test_an_error_record_of_a_row_nested_too_deep_to_encode_drops_the_row() -> None:
    deep: list[object] = []
    for _ in range(5000):
        deep = [deep]
    err = ErrorRecord("Txn", "schema", "why", "raw", 0, 1, b"[[[...]]]", "w", {"x": deep})
    doc = decode_error(encode_error(err))
    assert doc["row"] is None and doc["row_dropped"] and doc["payload"] == b"[[[...]]]"
