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

A source partition and the same partition of a pipeline that streams its dataset may run as
a chain (``chaining``: one thread, one transaction a batch): the two are placed together and
count as one thread; a chain whose pipeline leaves goes on as its source alone.

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
from dataclasses import dataclass, field
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


def streams_per_process(
    setting: int | None, want: Mapping[Key, JobRow], cores: int, chained: int = 0
) -> int:
    """The setting, or (None) the fewest stream threads a process (a partition, or a chain of
    two) that keep the engine's stream processes within ``PROCESSES_PER_CORE`` a core."""
    if setting is not None:
        return setting
    streams = sum(1 for job in want.values() if job.kind in STREAM_KINDS) - chained
    return max(1, -(-streams // (PROCESSES_PER_CORE * max(cores, 1))))


def plan_groups(
    want: Mapping[Key, JobRow],
    running: Iterable[Group],
    per_process: int,
    streams_per_process: int = 1,
    chains: Mapping[Key, Key] | None = None,
) -> list[Group]:
    """The process groups that run ``want``. A running group keeps running with those of its
    members still wanted (one that leaves stops alone: the others are not restarted); the
    other writer partitions are packed in key order, ``per_process`` a group at most; stream
    partitions ``streams_per_process`` at most, one partition of each job (``_slices``), a
    pipeline partition ``chains`` fuses with a source partition (both loose) in its source's
    group; every other partition is a group of its own."""
    groups: list[Group] = []
    for g in dict.fromkeys(running):
        rest = tuple(k for k in g if k in want)
        if rest:
            groups.append(rest)
    loose = set(want) - {k for g in groups for k in g}
    attached = {p: s for p, s in (chains or {}).items() if p in loose and s in loose}
    for kinds, most in ((SHARED_KINDS, per_process), (STREAM_KINDS, streams_per_process)):
        mine = sorted(k for k in loose if want[k].kind in kinds)
        groups += _slices(mine, most, attached) if kinds is STREAM_KINDS else _chunks(mine, most)
        loose -= set(mine)
    return sorted([*groups, *((k,) for k in sorted(loose))])


def chained_in(group: Group, chains: Mapping[Key, Key]) -> list[tuple[Key, Key]]:
    """The (source, pipeline) pairs of ``group`` that run as chains."""
    return [(s, p) for p, s in sorted(chains.items()) if p in group and s in group]


def _chunks(keys: list[Key], most: int) -> list[Group]:
    return [tuple(keys[i : i + most]) for i in range(0, len(keys), most)]


def _slices(keys: list[Key], most: int, attached: Mapping[Key, Key] | None = None) -> list[Group]:
    """Groups of at most ``most`` threads, no two partitions of one job: the keys are taken
    partition by partition (p0 of every job, then p1 …), so a group holds one slice of
    several jobs. A pipeline ``attached`` to a source goes where its source goes: the two run
    in one thread, a chain."""
    attached = attached or {}
    follows = {s: p for p, s in attached.items()}
    groups: list[list[Key]] = []

    def threads(g: list[Key]) -> int:
        return sum(1 for k in g if k not in attached)

    for key in sorted(keys, key=lambda k: (k[1], k[0])):
        if key in attached:
            continue  # placed with its source
        jobs = {key[0]} | ({follows[key][0]} if key in follows else set())
        home = next((g for g in groups if threads(g) < most and not jobs & {k[0] for k in g}),
                    None)  # fmt: skip
        if home is None:
            groups.append(home := [])
        home.append(key)
        if key in follows:
            home.append(follows[key])
    return [tuple(sorted(g)) for g in groups]


@dataclass
class _Unit:
    """What one thread of a shared process runs: a member, or a chain (source, pipeline)."""

    keys: list[Key]
    stop: threading.Event = field(default_factory=threading.Event)  # the whole unit
    chain_stop: threading.Event = field(default_factory=threading.Event)  # its chain only
    done: threading.Event = field(default_factory=threading.Event)


def run_together(
    settings: Settings,
    members: Sequence[tuple[JobRow, int]],
    owner: str,
    stop: threading.Event,
    control: Connection | None = None,
    chained: Sequence[tuple[Key, Key]] = (),
) -> None:
    """Each member's runner in a thread of this process, until ``stop`` or until all have
    ended; a ``chained`` (source, pipeline) pair runs as one chain in one thread
    (``engine.chain``). ``control`` is the supervisor's end of a pipe: it sends ``("stop",
    keys)`` for members that leave (their job removed or moved), and hears ``("ended", key)``
    of a member that ended on its own (removed, fenced or stopped for good), so it may start
    it anew; the others run on. A chain whose pipeline leaves goes on as its source alone, in
    the same thread. A member that raises stops them all and the failure is raised, so the
    process exits non-zero and its supervisor restarts the group."""
    rows = {(job.hash, p): job for job, p in members}
    paired = {k for pair in chained for k in pair}
    units = [_Unit(list(pair)) for pair in chained] + [_Unit([k]) for k in rows if k not in paired]
    told: set[int] = set()  # units whose end the supervisor has heard of
    failures: list[BaseException] = []
    wake = threading.Event()

    def one(u: _Unit) -> None:
        job, partition = rows[u.keys[0]], u.keys[0][1]
        name = f"{job.name}.p{partition}"
        try:
            reason = None
            if len(u.keys) > 1:
                partner = rows[u.keys[1]]
                reason = run_forever(settings, job, partition, owner, u.chain_stop,
                                     partner=partner)  # fmt: skip
                if u.chain_stop.is_set() and not u.stop.is_set():  # its pipeline left
                    u.keys = u.keys[:1]
                    log.info("%s: its pipeline %s left; it runs on alone", name, partner.name)
                    reason = run_forever(settings, job, partition, owner, u.stop)
            else:
                reason = run_forever(settings, job, partition, owner, u.stop)
            if not u.stop.is_set():
                log.info("%s ended (%s); the others in its process run on", name,
                         reason or "removed or fenced")  # fmt: skip
        except BaseException as e:  # noqa: BLE001 - reported, then raised by the group
            log.exception("%s failed; stopping its process group", name)
            failures.append(e)
        finally:
            u.done.set()
            wake.set()

    threads = [
        threading.Thread(
            target=one, args=(u,), name=f"{rows[u.keys[0]].name}.p{u.keys[0][1]}", daemon=True
        )  # fmt: skip
        for u in units
    ]
    for t in threads:
        t.start()
    while not (stop.is_set() or failures or all(u.done.is_set() for u in units)):
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
                    for u in units:
                        if key == u.keys[0]:  # a member, or a chain's source: all of it
                            u.stop.set()
                            u.chain_stop.set()
                        elif key in u.keys:  # a chain's pipeline: the source runs on
                            u.chain_stop.set()
        wake.clear()
        for i, u in enumerate(units):
            if u.done.is_set() and i not in told and control is not None:
                told.add(i)
                for key in u.keys:
                    with contextlib.suppress(OSError):
                        control.send(("ended", key))
    for u in units:
        u.stop.set()
        u.chain_stop.set()
    for t in threads:
        t.join()
    if failures:
        raise failures[0]
