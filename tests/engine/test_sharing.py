"""Which partitions share a runner process, and how a shared process ends (pure logic: the
real processes, Kafka and tables are in ``test_shared_writers``)."""

from __future__ import annotations

import multiprocessing
import threading
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fennel_dagster.engine import sharing
from fennel_dagster.metadata.registry import JobRow

KINDS = ["source", "pipeline", "index", "offline", "s3_sink", "kafka_sink", "http_sink",
         "s3_ingest", "pg_ingest"]  # fmt: skip


class _Job:
    """What ``plan_groups`` and ``run_together`` read of a job row."""

    def __init__(self, kind: str) -> None:
        self.kind = self.name = self.hash = kind


def _want(kinds: dict[tuple[str, int], str]) -> dict[tuple[str, int], JobRow]:
    return {k: _Job(kind) for k, kind in kinds.items()}  # type: ignore[misc]


keys = st.tuples(st.sampled_from("abcdefgh"), st.integers(0, 3))
# a job's kind is its own (as a job hash's is): the letter decides it
wants = st.lists(keys, max_size=24).map(
    lambda ks: {k: KINDS["abcdefgh".index(k[0]) % len(KINDS)] for k in ks}
)


@settings(max_examples=300, deadline=None)
@given(wants, wants, st.integers(1, 5), st.integers(1, 4), st.randoms(use_true_random=False))
def test_groups_cover_each_partition_once_and_keep_what_still_runs(
    before: dict[tuple[str, int], str],
    now: dict[tuple[str, int], str],
    per_process: int,
    streams: int,
    rnd: Any,
) -> None:
    running = sharing.plan_groups(_want(before), [], per_process, streams)
    rnd.shuffle(running)
    groups = sharing.plan_groups(_want(now), running, per_process, streams)
    flat = [k for g in groups for k in g]
    assert sorted(flat) == sorted(now)  # every wanted partition, in one group
    pools = [(sharing.SHARED_KINDS, per_process), (sharing.STREAM_KINDS, streams)]
    for g in groups:
        assert len(g) >= 1
        if len(g) > 1:  # writers share with writers, streams with streams, no one else
            kinds, most = next((ks, m) for ks, m in pools if now[g[0]] in ks)
            assert all(now[k] in kinds for k in g) and len(g) <= most, g
            if kinds is sharing.STREAM_KINDS:  # one partition of a job a process, at most
                assert len({job for job, _ in g}) == len(g), g
    for g in running:  # a running group runs on with its members still wanted
        rest = tuple(k for k in g if k in now)
        assert not rest or rest in groups, (g, rest)
    if per_process == 1 and streams == 1:
        assert all(len(g) == 1 for g in groups)


def test_writers_pack_and_the_hot_path_stays_alone() -> None:
    want = _want({("src", 0): "source", ("pipe", 0): "pipeline", ("pipe", 1): "pipeline",
                  ("off1", 0): "offline", ("off2", 0): "offline", ("sink", 0): "kafka_sink",
                  ("ingest", 0): "s3_ingest"})  # fmt: skip
    groups = sharing.plan_groups(want, [], 2)
    assert sorted(groups) == sorted([
        (("ingest", 0),), (("pipe", 0),), (("pipe", 1),), (("src", 0),),
        (("off1", 0), ("off2", 0)), (("sink", 0),),
    ])  # fmt: skip
    # a new writer does not restart a full group: it starts one of its own
    more = {**want, **_want({("off0", 0): "offline"})}
    assert (("off1", 0), ("off2", 0)) in sharing.plan_groups(more, groups, 2)
    # a writer leaving leaves the others running where they are
    fewer = {k: v for k, v in want.items() if k != ("off2", 0)}
    assert (("off1", 0),) in sharing.plan_groups(fewer, groups, 2)


def test_a_member_that_fails_stops_the_others_and_the_failure_is_raised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ran: list[str] = []

    def fake(
        settings: Any, job: Any, partition: int, owner: str, stop: threading.Event,
        partner: Any = None,
    ) -> None:  # fmt: skip
        if job.kind == "fails":
            time.sleep(0.2)
            raise RuntimeError("boom")
        stop.wait(30)  # until the group stops it
        ran.append(job.kind)

    monkeypatch.setattr(sharing, "run_forever", fake)
    members = [(_Job("waits"), 0), (_Job("fails"), 0), (_Job("waits"), 1)]
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="boom"):
        sharing.run_together(None, members, "o", threading.Event())  # type: ignore[arg-type]
    assert ran == ["waits", "waits"] and time.monotonic() - started < 10

    # a stop from outside (SIGTERM) stops every member, and nothing is raised
    ran.clear()
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    sharing.run_together(None, [(_Job("waits"), 0), (_Job("waits"), 1)], "o", stop)  # type: ignore[arg-type]
    assert ran == ["waits", "waits"]


def test_members_leave_or_end_alone_and_the_supervisor_hears_of_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ran: list[tuple[str, int]] = []

    def fake(
        settings: Any, job: Any, partition: int, owner: str, stop: threading.Event,
        partner: Any = None,
    ) -> None:  # fmt: skip
        if job.kind == "ends":  # removed or fenced: run_forever returns
            time.sleep(0.2)
            return
        stop.wait(30)
        ran.append((job.name, partition))

    monkeypatch.setattr(sharing, "run_forever", fake)
    members = [(_Job("ends"), 0), (_Job("stays"), 0), (_Job("leaves"), 0)]
    ours, theirs = multiprocessing.Pipe()
    stop = threading.Event()
    group = threading.Thread(
        target=sharing.run_together, args=(None, members, "o", stop, theirs), daemon=True
    )
    group.start()
    assert ours.poll(5) and ours.recv() == ("ended", ("ends", 0))  # it ended; the rest run on
    ours.send(("stop", [("leaves", 0)]))  # the supervisor lets one go
    assert ours.poll(5) and ours.recv() == ("ended", ("leaves", 0))
    assert ran == [("leaves", 0)] and group.is_alive()
    stop.set()  # SIGTERM: the last one stops too
    group.join(10)
    assert not group.is_alive() and ran == [("leaves", 0), ("stays", 0)]


def test_stream_partitions_pack_by_slice_so_a_job_keeps_its_parallelism() -> None:
    want = _want({("src", 0): "source", ("src", 1): "source", ("pipe", 0): "pipeline",
                  ("pipe", 1): "pipeline", ("idx", 0): "index", ("idx", 1): "index",
                  ("off", 0): "offline", ("ingest", 0): "s3_ingest"})  # fmt: skip
    # by default each stream partition keeps a process of its own
    assert all(len(g) == 1 or now_kind(want, g) == "offline"
               for g in sharing.plan_groups(want, [], 8))  # fmt: skip
    groups = sharing.plan_groups(want, [], 8, 3)
    assert sorted(groups) == sorted([
        (("idx", 0), ("pipe", 0), ("src", 0)), (("idx", 1), ("pipe", 1), ("src", 1)),
        (("off", 0),), (("ingest", 0),),
    ])  # fmt: skip
    # two a process: the slices fill in partition order, never two partitions of one job
    two = sharing.plan_groups(want, [], 8, 2)
    assert (("idx", 0), ("pipe", 0)) in two and (("idx", 1), ("src", 0)) in two
    assert (("pipe", 1), ("src", 1)) in two
    # a job added later starts a group of its own; the running slices are left alone
    more = {**want, **_want({("new", 0): "pipeline", ("new", 1): "pipeline"})}
    again = sharing.plan_groups(more, groups, 8, 3)
    assert (("idx", 0), ("pipe", 0), ("src", 0)) in again and (("new", 0),) in again


def now_kind(want: dict[tuple[str, int], JobRow], group: tuple[tuple[str, int], ...]) -> str:
    return want[group[0]].kind


def test_by_default_an_engine_packs_streams_only_past_two_processes_a_core() -> None:
    few = _want({(j, p): "pipeline" for j in "ab" for p in range(2)})  # 4 stream partitions
    assert sharing.streams_per_process(None, few, cores=2) == 1  # a process each
    many = _want({(j, p): k for j, k in zip("abcdefgh", KINDS[:8], strict=True) for p in range(2)})
    streams = sum(k in sharing.STREAM_KINDS for k in KINDS[:8]) * 2  # 6 of them, writers aside
    assert streams == 6
    assert sharing.streams_per_process(None, many, cores=1) == 3  # 6 over 2 processes
    assert sharing.streams_per_process(None, many, cores=2) == 2  # over 4 (3 of them, by slice)
    assert sharing.streams_per_process(None, many, cores=64) == 1
    assert sharing.streams_per_process(5, many, cores=64) == 5  # a setting is taken as it is
    groups = sharing.plan_groups(many, [], 8, sharing.streams_per_process(None, many, cores=1))
    stream_groups = [g for g in groups if many[g[0]].kind in sharing.STREAM_KINDS]
    assert len(stream_groups) == 2 and all(len(g) == 3 for g in stream_groups)
