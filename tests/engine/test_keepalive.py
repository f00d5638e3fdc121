"""The engine sensor's decisions: one live run per partition, judged by heartbeats."""

from __future__ import annotations

from fennel_dagster.engine.keepalive import DEAD_AFTER_S, STARTUP_GRACE_S, LiveRun, plan
from fennel_dagster.metadata.registry import JobRow

JOB = JobRow("h1", "ns.job.A.agg", "pipeline", 2, {})


def test_new_job_partitions_are_added_and_get_a_run_each() -> None:
    p = plan([JOB], [], [], {})
    assert p.add_partitions == ["ns.job.A.agg:0", "ns.job.A.agg:1"]
    assert p.launch == ["ns.job.A.agg:0", "ns.job.A.agg:1"]


def test_a_beating_run_is_left_alone_and_a_silent_one_is_failed_and_relaunched() -> None:
    runs = [LiveRun("r0", "ns.job.A.agg:0", 300, True), LiveRun("r1", "ns.job.A.agg:1", 300, True)]
    beats = {("h1", 0): ("run:r0", 1.0), ("h1", 1): ("run:r1", DEAD_AFTER_S + 1)}
    p = plan([JOB], ["ns.job.A.agg:0", "ns.job.A.agg:1"], runs, beats)
    assert p.mark_failed == ["r1"] and p.launch == ["ns.job.A.agg:1"] and not p.add_partitions


def test_a_starting_run_gets_a_grace_period_but_not_forever() -> None:
    young = [LiveRun("r0", "ns.job.A.agg:0", 5, False)]
    assert plan([JOB], [], young, {}).mark_failed == []
    old = [LiveRun("r0", "ns.job.A.agg:0", STARTUP_GRACE_S + 1, True)]
    assert plan([JOB], [], old, {}).mark_failed == ["r0"]


def test_a_run_that_beat_and_went_silent_is_dead_even_while_young() -> None:
    runs = [LiveRun("r0", "ns.job.A.agg:0", 20, True)]
    p = plan([JOB], [], runs, {("h1", 0): ("run:r0", DEAD_AFTER_S + 2)})
    assert p.mark_failed == ["r0"] and "ns.job.A.agg:0" in p.launch


def test_removed_jobs_lose_their_partitions_and_runs() -> None:
    runs = [LiveRun("r9", "ns.job.Gone.agg:0", 300, True)]
    p = plan([], ["ns.job.Gone.agg:0"], runs, {})
    assert p.delete_partitions == ["ns.job.Gone.agg:0"] and p.terminate == ["r9"]
    assert not p.launch


def test_two_live_runs_for_one_partition_keep_one() -> None:
    runs = [LiveRun("a", "ns.job.A.agg:0", 300, True), LiveRun("b", "ns.job.A.agg:0", 10, False)]
    p = plan([JOB], [], runs, {("h1", 0): ("run:a", 1.0)})
    assert p.terminate == ["b"]
