"""Which partitions share a runner process, and how a shared process ends (pure logic: the
real processes, Kafka and tables are in ``test_shared_writers``)."""

from __future__ import annotations

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
        self.kind = self.name = kind


def _want(kinds: dict[tuple[str, int], str]) -> dict[tuple[str, int], JobRow]:
    return {k: _Job(kind) for k, kind in kinds.items()}  # type: ignore[misc]


keys = st.tuples(st.sampled_from("abcdefgh"), st.integers(0, 3))
wants = st.dictionaries(keys, st.sampled_from(KINDS), max_size=24)


@settings(max_examples=300, deadline=None)
@given(wants, wants, st.integers(1, 5), st.randoms(use_true_random=False))
def test_groups_cover_each_partition_once_and_keep_what_still_runs(
    before: dict[tuple[str, int], str],
    now: dict[tuple[str, int], str],
    per_process: int,
    rnd: Any,
) -> None:
    running = sharing.plan_groups(_want(before), [], per_process)
    rnd.shuffle(running)
    groups = sharing.plan_groups(_want(now), running, per_process)
    flat = [k for g in groups for k in g]
    assert sorted(flat) == sorted(now)  # every wanted partition, in one group
    for g in groups:
        assert 1 <= len(g) <= max(per_process, 1)
        if len(g) > 1:  # only writers share
            assert all(now[k] in sharing.SHARED_KINDS for k in g), g
    for g in running:  # a running group whose members are all still writers stays as it is
        if len(g) > 1 and all(now.get(k) in sharing.SHARED_KINDS for k in g):
            assert g in groups
    if per_process == 1:
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
    # a writer leaving dissolves its group: the rest is packed again
    fewer = {k: v for k, v in want.items() if k != ("off2", 0)}
    assert (("off1", 0), ("sink", 0)) in sharing.plan_groups(fewer, groups, 2)


def test_a_member_that_ends_stops_the_others_and_a_failure_is_raised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ran: list[str] = []

    def fake(settings: Any, job: Any, partition: int, owner: str, stop: threading.Event) -> None:
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
