"""The engine sensor's decisions: one live run per partition, judged by heartbeats."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from fennel_dagster.engine.keepalive import (
    DEAD_AFTER_S,
    STARTUP_GRACE_S,
    LiveRun,
    display_name,
    launch_priority,
    partition_keys,
    plan,
)
from fennel_dagster.metadata.registry import JobRow


def job(h: str, name: str, kind: Any = "pipeline", dataset: str = "A", version: int = 1) -> JobRow:
    spec: Any = SimpleNamespace(dataset=SimpleNamespace(name=dataset, version=version))
    return JobRow(h, name, kind, 2, spec)


JOB = job("h1", "ns.job.A.agg.0123456789ab")


def test_partition_keys_read_as_dataset_pipeline_and_partition() -> None:
    assert list(partition_keys([JOB])) == ["A.agg/0", "A.agg/1"]
    assert display_name(job("h2", "ns.job.Txn.src0.0123", "source", "Txn")) == "Txn.src0"
    assert display_name(job("h3", "ns.index.M.v3.0123", "index", "M", 3)) == "M.v3.index"
    assert display_name(job("h4", "ns.offline.A.v1.0123", "offline")) == "A.offline"
    assert display_name(job("h5", "ns.s3ingest.A.src1.0123", "s3_ingest")) == "A.src1.ingest"
    # a version bump: the new version's jobs read apart from the old one's
    assert display_name(job("h6", "ns.job.A.agg.4567", dataset="A", version=2)) == "A.v2.agg"


def test_two_jobs_that_read_the_same_carry_their_hash_head() -> None:
    twin = job("h7abcdef99", "ns.job.A.agg.fedcba987654")
    keys = partition_keys([JOB, twin])
    assert sorted(keys) == ["A.agg~h1/0", "A.agg~h1/1", "A.agg~h7abcdef/0", "A.agg~h7abcdef/1"]
    assert keys["A.agg~h7abcdef/1"] == (twin, 1)


def test_new_job_partitions_are_added_and_get_a_run_each() -> None:
    p = plan([JOB], [], [], {})
    assert p.add_partitions == ["A.agg/0", "A.agg/1"]
    assert p.launch == ["A.agg/0", "A.agg/1"]


def test_jobs_that_serve_lookups_launch_before_writers_and_ingests() -> None:
    jobs = [job("h1", "ns.offline.A.v1.0123", "offline"), job("h2", "ns.index.B.v1.0123", "index", "B"),
            job("h3", "ns.s3ingest.A.src1.0123", "s3_ingest"), job("h4", "ns.job.C.agg.0123", dataset="C"),
            job("h5", "ns.job.A.src0.0123", "source"), job("h6", "ns.sink.A.0123", "kafka_sink")]  # fmt: skip
    launch = plan(jobs, [], [], {}).launch
    first = [k for k in launch if launch_priority(partition_keys(jobs)[k][0]) == 1]
    assert launch[: len(first)] == first and len(first) == 6  # 3 serving jobs x 2 partitions
    assert {k.split("/")[0] for k in first} == {"B.index", "C.agg", "A.src0"}
    assert first == sorted(first) and launch[6:] == sorted(launch[6:])


def test_a_beating_run_is_left_alone_and_a_silent_one_is_failed_and_relaunched() -> None:
    runs = [LiveRun("r0", "A.agg/0", 300, True), LiveRun("r1", "A.agg/1", 300, True)]
    beats = {("h1", 0): ("run:r0", 1.0), ("h1", 1): ("run:r1", DEAD_AFTER_S + 1)}
    p = plan([JOB], ["A.agg/0", "A.agg/1"], runs, beats)
    assert p.mark_failed == ["r1"] and p.launch == ["A.agg/1"] and not p.add_partitions


def test_a_starting_run_gets_a_grace_period_but_not_forever() -> None:
    young = [LiveRun("r0", "A.agg/0", 5, True)]
    assert plan([JOB], [], young, {}).mark_failed == []
    old = [LiveRun("r0", "A.agg/0", STARTUP_GRACE_S + 1, True)]
    assert plan([JOB], [], old, {}).mark_failed == ["r0"]


def test_a_run_still_waiting_in_the_queue_is_not_failed_however_long_it_waits() -> None:
    queued = [LiveRun("r0", "A.agg/0", STARTUP_GRACE_S * 3, False)]
    p = plan([JOB], ["A.agg/0", "A.agg/1"], queued, {})
    assert p.mark_failed == [] and p.launch == ["A.agg/1"]


def test_a_run_that_beat_and_went_silent_is_dead_even_while_young() -> None:
    runs = [LiveRun("r0", "A.agg/0", 20, True)]
    p = plan([JOB], [], runs, {("h1", 0): ("run:r0", DEAD_AFTER_S + 2)})
    assert p.mark_failed == ["r0"] and "A.agg/0" in p.launch


def test_removed_jobs_lose_their_partitions_and_runs() -> None:
    runs = [LiveRun("r9", "Gone.agg/0", 300, True)]
    p = plan([], ["Gone.agg/0"], runs, {})
    assert p.delete_partitions == ["Gone.agg/0"] and p.terminate == ["r9"]
    assert not p.launch


def test_two_live_runs_for_one_partition_keep_one() -> None:
    runs = [LiveRun("a", "A.agg/0", 300, True), LiveRun("b", "A.agg/0", 10, False)]
    p = plan([JOB], [], runs, {("h1", 0): ("run:a", 1.0)})
    assert p.terminate == ["b"]
