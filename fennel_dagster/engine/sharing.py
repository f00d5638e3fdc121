"""Several job partitions in one runner process, for the jobs that mostly wait.

Offline-table and sink writers copy a topic out (Delta commits, HTTP posts, one Kafka
transaction a batch): what a process each costs them is memory, Kafka clients and start-up,
not CPU. An engine packs them, up to ``engine_writers_per_process`` a process; sources,
pipelines, indexes and history ingests (a Spark session each) keep a process of their own,
so the hot path uses every core.

A shared process lives while all its members run. When one ends (its job removed, fenced,
stopped for good, or failed), the others are stopped too and the supervisor starts the group
again from what it owns then: each member recovers exactly once from its durable state, as
after any restart, and a process follows one rule whatever it holds.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping, Sequence

from fennel_dagster.engine.runner import run_forever
from fennel_dagster.metadata.registry import JobRow
from fennel_dagster.settings import Settings

log = logging.getLogger("fennel_dagster.engine.sharing")

Key = tuple[str, int]  # (job hash, partition)
Group = tuple[Key, ...]  # the partitions one runner process runs, in key order

# the writers: each copies one topic out and spends its time waiting on I/O
SHARED_KINDS: frozenset[str] = frozenset({"offline", "s3_sink", "kafka_sink", "http_sink"})


def plan_groups(
    want: Mapping[Key, JobRow], running: Iterable[Group], per_process: int
) -> list[Group]:
    """The process groups that run ``want``. A running group stays while each of its members
    is still wanted (no needless restart); the other writer partitions are packed in key
    order, ``per_process`` a group at most; every other partition is a group of its own."""
    shareable = {k for k, job in want.items() if job.kind in SHARED_KINDS and per_process > 1}
    kept = [g for g in dict.fromkeys(running) if len(g) > 1 and set(g) <= shareable]
    placed = {k for g in kept for k in g}
    loose = sorted(shareable - placed)
    packed = [tuple(loose[i : i + per_process]) for i in range(0, len(loose), per_process)]
    alone = [(k,) for k in sorted(set(want) - shareable)]
    return sorted([*kept, *packed, *alone])


def run_together(
    settings: Settings, members: Sequence[tuple[JobRow, int]], owner: str, stop: threading.Event
) -> None:
    """Each member's runner in a thread of this process, until ``stop`` or until one of them
    ends; then all are stopped. Raises the first failure, so the process exits non-zero."""
    ended = threading.Event()
    stops = [threading.Event() for _ in members]
    failures: list[BaseException] = []

    def one(i: int, job: JobRow, partition: int) -> None:
        try:
            reason = run_forever(settings, job, partition, owner, stops[i])
            if not stop.is_set() and not ended.is_set():  # the first to end, on its own
                log.info("%s.p%d ended (%s); its process group stops",
                         job.name, partition, reason or "removed or fenced")  # fmt: skip
        except BaseException as e:  # noqa: BLE001 - reported, then raised by the group
            log.exception("%s.p%d failed; stopping its process group", job.name, partition)
            failures.append(e)
        finally:
            ended.set()

    threads = [
        threading.Thread(target=one, args=(i, job, p), name=f"{job.name}.p{p}", daemon=True)
        for i, (job, p) in enumerate(members)
    ]
    for t in threads:
        t.start()
    while not (stop.is_set() or ended.is_set()):
        ended.wait(0.5)  # wakes now and then: the main thread runs the signal handlers
    for s in stops:
        s.set()
    for t in threads:
        t.join()
    if failures:
        raise failures[0]
