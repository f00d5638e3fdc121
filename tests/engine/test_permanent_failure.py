"""A job partition that cannot run stops, says why in the registry and in its Dagster run,
and is not restarted — while transient failures are retried (the crash tests prove those).

The failure here is a real one: a commit sent as wire bytes whose pipeline code does not
compile on the engine (as when a client's Python is newer than the engine's). The runner
fails on its first batch, every time: retrying would loop forever, unseen.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Iterator

import pytest
from dagster import DagsterInstance, SensorResult, build_sensor_context

from fennel_dagster import commit_spec
from fennel_dagster.client import LocalClient
from fennel_dagster.engine import keepalive
from fennel_dagster.engine.runner import run_forever
from fennel_dagster.engine.supervisor import Supervisor
from fennel_dagster.metadata import registry
from fennel_dagster.metadata.db import connect
from fennel_dagster.ops.rows import to_records
from fennel_dagster.settings import Settings, get_settings
from fennel_dagster.wire import spec
from tests.engine import repo
from tests.engine.harness import produce_rows

pytestmark = pytest.mark.services

BROKEN = spec.UserCode(source="def keep(df):\n    return df['amount'] > 0 if\n", entrypoint="keep")


def broken_commit(topic: str) -> spec.CommitSpec:
    """tests/engine/repo, with a filter whose shipped code does not compile before the sum."""
    c = commit_spec("broken", repo.graph(topic), [])
    spend = next(d for d in c.datasets if d.name == "Spend")
    p = spend.pipelines[0]
    inp, agg = p.nodes
    flt = spec.FilterNode(id="f0", input=inp.id, code=BROKEN)
    p = dataclasses.replace(p, nodes=(inp, flt, dataclasses.replace(agg, input="f0")))
    spend = dataclasses.replace(spend, pipelines=(p,))
    return dataclasses.replace(
        c, datasets=tuple(spend if d.name == "Spend" else d for d in c.datasets)
    )


@pytest.fixture
def broken_job(engine_settings: Settings) -> Iterator[tuple[Settings, registry.JobRow]]:
    s = engine_settings
    with LocalClient(s) as client:
        client.commit_spec(broken_commit(f"{s.namespace}.raw"))
    with connect(s, s.pg_schema, autocommit=True) as conn:
        pipe = next(j for j in registry.list_jobs(conn) if j.kind == "pipeline")
    produce_rows(s, pipe.spec.inputs[0].topic, to_records(repo.events(20)), by="uid")
    yield s, pipe


def _reason_of(s: Settings, job: registry.JobRow) -> dict[int, str]:
    with connect(s, s.pg_schema, autocommit=True) as conn:
        return {p: f.reason for (h, p), f in registry.failures(conn).items() if h == job.hash}


def test_a_permanently_failing_partition_stops_and_records_why(
    broken_job: tuple[Settings, registry.JobRow],
) -> None:
    s, pipe = broken_job
    part = 0  # produce_rows(by="uid") puts uid % 4 == 0 here: it has rows to fail on
    results: list[str | None] = []
    stop = threading.Event()
    t = threading.Thread(target=lambda: results.append(
        run_forever(s, pipe, part, "perm-test", stop)))  # fmt: skip
    t0 = time.monotonic()
    t.start()
    t.join(120)
    alive = t.is_alive()
    stop.set()
    t.join(30)
    assert not alive, "the runner kept retrying a permanent failure"
    reason = results[0]
    assert reason is not None
    assert "Spend" in reason and "does not compile" in reason, reason
    assert _reason_of(s, pipe) == {part: reason}
    print(f"\nstopped for good {time.monotonic() - t0:.1f}s after start: {reason}")

    # nobody restarts it: neither a supervisor nor the Dagster keep-alive sensor
    with connect(s, s.pg_schema, autocommit=True) as conn:
        jobs = registry.list_jobs(conn)
        failed = set(registry.failures(conn))
    sup = Supervisor.__new__(Supervisor)
    sup.engine_id, sup.skipped, sup.settings = "solo", {}, s
    owned = Supervisor.owned(sup, jobs, ["solo"], failed)
    assert (pipe.hash, part) not in owned and (pipe.hash, (part + 1) % pipe.partitions) in owned
    plan = keepalive.plan(jobs, [], [], {}, failed=failed)
    assert keepalive.partition_key(pipe, part, jobs) not in plan.launch
    assert keepalive.partition_key(pipe, (part + 1) % pipe.partitions, jobs) in plan.launch


@pytest.fixture
def code_location_of(
    broken_job: tuple[Settings, registry.JobRow], monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Settings, registry.JobRow]]:
    """The broken job's platform as the Dagster code location's settings (its environment)."""
    s, _ = broken_job
    for k, v in s.as_env().items():
        monkeypatch.setitem(os.environ, k, v)
    get_settings.cache_clear()
    try:
        yield broken_job
    finally:
        get_settings.cache_clear()


def test_the_dagster_run_of_a_failing_partition_fails_with_the_reason(
    code_location_of: tuple[Settings, registry.JobRow],
) -> None:
    s, pipe = code_location_of
    from resources import KafkaResource, MetadataStore

    with DagsterInstance.ephemeral() as instance:
        text = _failed_run(instance, pipe, {})
        assert "stopped for good" in text and "does not compile" in text, text

        # and the dataset's asset shows it: the stream-health observation names the reason
        from sensors.health import stream_health

        context = build_sensor_context(
            instance=instance,
            resources={"metadata": MetadataStore(), "kafka": KafkaResource()},
        )
        observed = stream_health(context)
        assert isinstance(observed, SensorResult)
        spend = next(e for e in observed.asset_events or []
                     if e.asset_key.path[-1] == "Spend")  # fmt: skip
        assert spend.metadata["stopped partitions"].value == 1
        assert "does not compile" in str(spend.metadata["stopped because"].value)
    assert 0 in _reason_of(s, pipe)


def test_a_run_of_another_platforms_schema_refuses_to_run(
    code_location_of: tuple[Settings, registry.JobRow],
) -> None:
    """Platforms sharing one Dagster storage share its run queue: a run tagged with another
    metadata schema, launched here, fails naming both schemas instead of running whatever
    this platform's job of that key is (or silently nothing)."""
    s, pipe = code_location_of
    with DagsterInstance.ephemeral() as instance:
        text = _failed_run(instance, pipe, {keepalive.SCHEMA_TAG: "another_platform"})
    assert "'another_platform'" in text and repr(s.pg_schema) in text, text
    assert "ran nothing" in text


def _failed_run(instance: DagsterInstance, job: registry.JobRow, tags: dict[str, str]) -> str:
    """What the failed Dagster run of ``job``'s partition 0 says (its error and description)."""
    from resources import FennelSettings
    from sensors.engine import engine_partition_run, job_partitions

    key = keepalive.partition_key(job, 0)
    instance.add_dynamic_partitions(job_partitions.name, [key])
    result = engine_partition_run.execute_in_process(
        partition_key=key,
        instance=instance,
        raise_on_error=False,
        resources={"fennel": FennelSettings()},
        tags=tags,
    )
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert failure.step_failure_data is not None
    data = failure.step_failure_data
    shown = data.user_failure_data
    return f"{data.error.message if data.error else ''} {shown.description if shown else ''}"
