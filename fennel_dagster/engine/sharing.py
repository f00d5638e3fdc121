"""Several job partitions in one runner process: writers that mostly wait, and stream
partitions once an engine owns more of them than its cores can keep busy.

Offline-table and sink writers copy a topic out (Delta commits, HTTP posts, one Kafka
transaction a batch): what a process each costs them is memory, Kafka clients and start-up,
not CPU. An engine packs them, up to ``engine_writers_per_process`` a process.

Stream partitions (sources, pipelines, indexes) are packed in the shape of Flink's slot
sharing: a group holds the *same* partition of different jobs (source p0, its pipeline's p0,
the index's p0 …), never two partitions of one job, so a job's parallelism still spreads over
processes while an engine of many small jobs pays a process per slice, not per job
partition. How many a process: ``engine_streams_per_process``, or by default as many as keep
about two stream processes a core (``streams_per_process``): an engine owning few partitions
gives each a process of its own, as a busy job wants every core; one owning many on a small
host stops paying a Python interpreter, pandas and Kafka clients for each (measured in
``bench/README.md``). History ingests (a Spark session each) stay alone.

A member that leaves (its job removed or moved to another engine: the supervisor says so
over a pipe) or ends on its own (fenced, stopped for good: it says so) stops alone; the
others run on, so a commit that removes one job does not restart the slices that held its
partitions. A member that fails stops the whole process: the supervisor starts the group
again, each member recovering exactly once from its durable state, as after any restart.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from multiprocessing.connection import Connection

from fennel_dagster.engine.runner import run_forever
from fennel_dagster.metadata.registry import JobRow
from fennel_dagster.settings import Settings

log = logging.getLogger("fennel_dagster.engine.sharing")

Key = tuple[str, int]  # (job hash, partition)
Group = tuple[Key, ...]  # the partitions one runner process runs, in key order

# the writers: each copies one topic out and spends its time waiting on I/O
SHARED_KINDS: frozenset[str] = frozenset({"offline", "s3_sink", "kafka_sink", "http_sink"})
# the stream jobs: packed by slice (``_slices``), ``streams_per_process`` a process
STREAM_KINDS: frozenset[str] = frozenset({"source", "pipeline", "index"})


# stream processes an engine aims at per core when packing on its own: two, so that while
# one stage of a path waits on Kafka another has a process to run in
PROCESSES_PER_CORE = 2


def streams_per_process(setting: int | None, want: Mapping[Key, JobRow], cores: int) -> int:
    """The setting, or (None) the fewest stream partitions a process that keep the engine's
    stream processes within ``PROCESSES_PER_CORE`` a core."""
    if setting is not None:
        return setting
    streams = sum(1 for job in want.values() if job.kind in STREAM_KINDS)
    return max(1, -(-streams // (PROCESSES_PER_CORE * max(cores, 1))))


def plan_groups(
    want: Mapping[Key, JobRow],
    running: Iterable[Group],
    per_process: int,
    streams_per_process: int = 1,
) -> list[Group]:
    """The process groups that run ``want``. A running group keeps running with those of its
    members still wanted (one that leaves stops alone: the others are not restarted); the
    other writer partitions are packed in key order, ``per_process`` a group at most; stream
    partitions ``streams_per_process`` at most, one partition of each job (``_slices``);
    every other partition is a group of its own."""
    groups: list[Group] = []
    for g in dict.fromkeys(running):
        rest = tuple(k for k in g if k in want)
        if rest:
            groups.append(rest)
    loose = set(want) - {k for g in groups for k in g}
    for kinds, most in ((SHARED_KINDS, per_process), (STREAM_KINDS, streams_per_process)):
        mine = sorted(k for k in loose if want[k].kind in kinds)
        groups += _slices(mine, most) if kinds is STREAM_KINDS else _chunks(mine, most)
        loose -= set(mine)
    return sorted([*groups, *((k,) for k in sorted(loose))])


def _chunks(keys: list[Key], most: int) -> list[Group]:
    return [tuple(keys[i : i + most]) for i in range(0, len(keys), most)]


def _slices(keys: list[Key], most: int) -> list[Group]:
    """Groups of at most ``most`` keys, no two of one job: the keys are taken partition by
    partition (p0 of every job, then p1 …), so a group holds one slice of several jobs."""
    groups: list[list[Key]] = []
    for key in sorted(keys, key=lambda k: (k[1], k[0])):
        home = next((g for g in groups if len(g) < most and all(k[0] != key[0] for k in g)), None)
        if home is None:
            groups.append(home := [])
        home.append(key)
    return [tuple(sorted(g)) for g in groups]


def run_together(
    settings: Settings,
    members: Sequence[tuple[JobRow, int]],
    owner: str,
    stop: threading.Event,
    control: Connection | None = None,
) -> None:
    """Each member's runner in a thread of this process, until ``stop`` or until all have
    ended. ``control`` is the supervisor's end of a pipe: it sends ``("stop", keys)`` for
    members that leave (their job removed or moved), and hears ``("ended", key)`` of a member
    that ended on its own (removed, fenced or stopped for good), so it may start it anew; the
    others run on. A member that raises stops them all and the failure is raised, so the
    process exits non-zero and its supervisor restarts the group."""
    keys = [(job.hash, p) for job, p in members]
    stops = [threading.Event() for _ in members]
    done = [threading.Event() for _ in members]
    told: set[int] = set()  # members whose end the supervisor has heard of
    failures: list[BaseException] = []
    wake = threading.Event()

    def one(i: int, job: JobRow, partition: int) -> None:
        try:
            reason = run_forever(settings, job, partition, owner, stops[i])
            if not stops[i].is_set():
                log.info("%s.p%d ended (%s); the others in its process run on",
                         job.name, partition, reason or "removed or fenced")  # fmt: skip
        except BaseException as e:  # noqa: BLE001 - reported, then raised by the group
            log.exception("%s.p%d failed; stopping its process group", job.name, partition)
            failures.append(e)
        finally:
            done[i].set()
            wake.set()

    threads = [
        threading.Thread(target=one, args=(i, job, p), name=f"{job.name}.p{p}", daemon=True)
        for i, (job, p) in enumerate(members)
    ]
    for t in threads:
        t.start()
    while not (stop.is_set() or failures or all(d.is_set() for d in done)):
        # wakes now and then: the main thread runs the signal handlers
        if control is None or not control.poll(0.5):
            wake.wait(0.0 if control is not None else 0.5)
        else:
            try:
                verb, which = control.recv()
            except (EOFError, OSError):  # the supervisor is gone
                break
            if verb == "stop":
                for key in map(tuple, which):
                    if key in keys:
                        stops[keys.index(key)].set()
        wake.clear()
        for i in range(len(members)):
            if done[i].is_set() and i not in told and control is not None:
                told.add(i)
                with contextlib.suppress(OSError):
                    control.send(("ended", keys[i]))
    for s in stops:
        s.set()
    for t in threads:
        t.join()
    if failures:
        raise failures[0]
