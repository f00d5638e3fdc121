"""The engine, run by Dagster: one long-running run per job partition, kept alive by a sensor.

``job_partitions`` (dynamic) mirrors the job registry; ``engine_partition_run`` runs the
engine's runner for one partition in the run's own process (in-process executor, so killing
the run's process kills the runner); ``engine_keepalive`` adds/removes partitions, launches
a run for every partition without a live one, marks runs whose runner stopped heartbeating
as failed (Dagster's default launcher cannot see a SIGKILLed worker) and relaunches them, and
stops runs of removed jobs. Decisions live in ``fennel_dagster.engine.keepalive``.
"""

import logging
import re
import socket
import threading
import time
from datetime import UTC, datetime

import psycopg
from dagster import (
    AddDynamicPartitionsRequest,
    AssetKey,
    AssetObservation,
    DagsterError,
    DagsterInstance,
    DagsterRunStatus,
    DefaultSensorStatus,
    DeleteDynamicPartitionsRequest,
    DynamicPartitionsDefinition,
    Failure,
    OpExecutionContext,
    RunRequest,
    RunsFilter,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    in_process_executor,
    job,
    op,
    sensor,
)
from tenacity import Retrying, retry_if_exception_type, stop_when_event_set, wait_exponential

from fennel_dagster.commit.catalog import asset_path
from fennel_dagster.dagster_home import stopping
from fennel_dagster.engine import keepalive
from fennel_dagster.engine.lookup_server import Followers, serve
from fennel_dagster.engine.outage import Outage
from fennel_dagster.engine.rocks_tuning import RocksTuning
from fennel_dagster.engine.runner import run_forever, state_path
from fennel_dagster.engine.statedir import drop_unowned
from fennel_dagster.metadata import registry, tokens
from fennel_dagster.metadata.db import connect
from fennel_dagster.metadata.migrate import migrate
from fennel_dagster.settings import Settings, get_settings
from resources import FennelSettings
from sensors import unreachable

log = logging.getLogger("fennel_dagster.sensors.engine")

# Platforms with different metadata schemas may share one Dagster database: each has its
# own partitions and only ever touches runs tagged with its schema.
SCHEMA = get_settings().pg_schema
JOB_PARTITIONS = f"fennel_job_partitions_{re.sub(r'[^A-Za-z0-9_]', '_', SCHEMA)}"
job_partitions = DynamicPartitionsDefinition(name=JOB_PARTITIONS)
PARTITION_TAG, SCHEMA_TAG, SLOT_TAG = (
    keepalive.PARTITION_TAG,
    keepalive.SCHEMA_TAG,
    keepalive.SLOT_TAG,
)
STANDING_DOWN = "fennel-dagster dev is stopping: no engine runs launched or failed"
LIVE = [DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING,
        DagsterRunStatus.STARTED]  # fmt: skip


@op(description="Runs the engine's exactly-once runner for one job partition until stopped.")
def run_job_partition(context: OpExecutionContext, fennel: FennelSettings) -> None:
    settings = fennel.settings()
    tagged = context.run.tags.get(SCHEMA_TAG)
    if tagged is not None and tagged != settings.pg_schema:
        # platforms sharing one Dagster storage share its run queue: another platform's
        # daemon may launch this run with its own settings, where the key means another job
        raise Failure(
            description=f"run {context.run_id} belongs to the platform of metadata schema "
            f"{tagged!r}, but the code location that launched it has schema "
            f"{settings.pg_schema!r}: a daemon of another platform sharing this Dagster storage "
            "(a second `fennel-dagster dev`?) took it from the queue. Stop that daemon, or give "
            "each platform its own Dagster storage; this run ran nothing.",
            metadata={"run schema": tagged, "settings schema": settings.pg_schema},
        )
    with connect(settings, settings.pg_schema, autocommit=True) as conn:
        jobs = registry.list_jobs(conn)
        branches = registry.jobs_by_branch(conn)
    key = context.partition_key
    job, partition = keepalive.partition_keys(jobs).get(key, (None, 0))
    if job is None:
        context.log.warning(f"no job of the registry has partition {key} now; nothing to run")
        return
    name = job.name
    context.log.info(f"running {name} partition {partition}")
    # the run's page names the dataset it keeps fresh, and the dataset's page this run
    for branch in sorted(b for b, js in branches.items() if any(j.hash == job.hash for j in js)):
        context.log_event(AssetObservation(
            asset_key=AssetKey(asset_path(branch, job.spec.dataset.name)),
            metadata={"engine run": key, "job": name, "job hash": job.hash,
                      "partition": partition, "kind": job.kind},
        ))  # fmt: skip
    owner = f"run:{context.run_id}"
    # state lives per host, not per run: a relaunched run finds its RocksDB warm, and no run
    # leaves a copy behind; state of jobs that left the registry is dropped here
    home = f"dagster-{socket.gethostname()}"
    live = {j.name for j in jobs}
    drop_unowned(settings.state_path / home, lambda j, p: j in live, f"run {context.run_id}")
    stop = threading.Event()
    serving = serve_lookups(settings, job, partition, owner, home, stop)
    try:
        reason = run_forever(settings, job, partition, owner, stop, home)
    finally:
        stop.set()
        serving.join(10)
    with connect(settings, settings.pg_schema, autocommit=True) as conn:
        if not registry.job_exists(conn, job.hash):  # deleted: its state goes with it
            drop_unowned(settings.state_path / home,
                         lambda j, p: (j, p) != (name, partition), f"run {context.run_id}")  # fmt: skip
    if reason is not None:
        raise Failure(
            description=f"{name} partition {partition} stopped for good: {reason}",
            metadata={"job": name, "partition": partition, "reason": reason},
        )


def serve_lookups(
    settings: Settings,
    job: registry.JobRow,
    partition: int,
    owner: str,
    home: str,
    stop: threading.Event,
) -> threading.Thread:
    """This run's lookup endpoint, registered as an endpoint-only engine (id ``run:...``)."""
    followers = Followers(
        lambda j, p: state_path(settings, home, j.name, p), RocksTuning.of(settings)
    )
    with connect(settings, settings.pg_schema, autocommit=True) as conn:
        migrate(conn)
        secret = tokens.service_secret(conn)
    server = serve(
        settings.host,
        0,
        lambda h, p: job if (h, p) == (job.hash, partition) else None,
        followers,
        secret,
    )
    address = f"{settings.host}:{server.server_address[1]}"

    outage = Outage(owner, "Postgres", log)

    def heartbeats() -> None:
        with connect(settings, settings.pg_schema, autocommit=True) as conn:
            while True:
                registry.heartbeat_engine(conn, owner, address, settings.engine_lease_s)
                if (over := outage.end()) is not None:
                    registry.record_outage(conn, over)
                if stop.wait(2.0):
                    break
            registry.deregister_engine(conn, owner)

    def beat() -> None:
        # Postgres restarts are ridden out: reconnect with backoff (said once per outage);
        # the endpoint's lease lapses meanwhile
        try:
            Retrying(
                retry=retry_if_exception_type((psycopg.OperationalError, psycopg.InterfaceError)),
                wait=wait_exponential(multiplier=0.5, max=10.0),
                stop=stop_when_event_set(stop),
                sleep=lambda seconds: None if stop.wait(seconds) else None,
                before_sleep=lambda state: outage.begin(
                    (state.outcome.exception() if state.outcome else None) or RuntimeError("?"),
                    "lookup endpoint reconnecting with backoff",
                ),
                reraise=True,
            )(heartbeats)
        except psycopg.Error as e:  # stopped while Postgres was away: the lease lapses
            log.warning("lookup endpoint %s: stopped without deregistering (%s)", owner, e)
        finally:
            server.shutdown()

    t = threading.Thread(target=beat, name="lookup-endpoint", daemon=True)
    t.start()
    return t


@job(
    partitions_def=job_partitions,
    executor_def=in_process_executor,
    description="One job partition of the streaming engine (long-running).",
    tags={"fennel/kind": "engine"},
)
def engine_partition_run() -> None:
    run_job_partition()


assert engine_partition_run.name == keepalive.ENGINE_JOB  # fennel-dagster dev closes its runs


@sensor(
    job=engine_partition_run,
    minimum_interval_seconds=5,
    default_status=DefaultSensorStatus.RUNNING,
    description="Keeps one live run per job partition; relaunches runs whose runner died.",
)
def engine_keepalive(
    context: SensorEvaluationContext, fennel: FennelSettings
) -> SensorResult | SkipReason:
    settings = fennel.settings()
    if not settings.dagster_engine:
        return SkipReason("the engine runs elsewhere (FENNEL_DAGSTER_ENGINE=false)")
    instance = context.instance
    if stopping(instance.root_directory):
        return SkipReason(STANDING_DOWN)
    try:
        with connect(settings, settings.pg_schema, autocommit=True) as conn:
            jobs = registry.list_jobs(conn)
            beats = registry.runner_owners(conn)
            failed = set(registry.failures(conn))
    except psycopg.errors.UndefinedTable:
        return SkipReason(f"nothing committed yet (no job registry in {settings.pg_schema!r})")
    except psycopg.OperationalError as e:  # engine runs keep running; their leases lapse
        return unreachable(e)
    now = time.time()
    records = instance.get_runs(
        filters=RunsFilter(job_name=engine_partition_run.name, statuses=LIVE,
                           tags={SCHEMA_TAG: settings.pg_schema})
    )  # fmt: skip
    runs = []
    for r in records:
        key = r.tags.get(PARTITION_TAG) or r.tags.get("dagster/partition")
        if not key:
            continue
        stats = instance.get_run_stats(r.run_id)
        began = stats.start_time or stats.enqueued_time or stats.launch_time or now
        runs.append(
            keepalive.LiveRun(r.run_id, key, now - began, r.status == DagsterRunStatus.STARTED)
        )
    plan = keepalive.plan(
        jobs, instance.get_dynamic_partitions(JOB_PARTITIONS), runs, beats, failed=failed
    )
    if stopping(instance.root_directory):  # the session began to stop during this tick
        return SkipReason(STANDING_DOWN)
    for run_id in plan.mark_failed:
        run = instance.get_run_by_id(run_id)
        if run is not None:
            instance.report_run_failed(run, message="runner heartbeat lost; relaunching")
    for run_id in plan.terminate:
        stop_run(instance, run_id)
    by_key = keepalive.partition_keys(jobs)
    requests = [
        RunRequest(partition_key=k, run_key=f"{k}@{datetime.now(UTC).isoformat()}",
                   tags={PARTITION_TAG: k, SCHEMA_TAG: settings.pg_schema,
                         SLOT_TAG: f"{settings.pg_schema}/{k}",
                         "fennel/job": by_key[k][0].name,
                         "fennel/job-hash": by_key[k][0].hash,
                         "fennel/dataset": by_key[k][0].spec.dataset.name,
                         "dagster/priority": str(keepalive.launch_priority(by_key[k][0]))})
        for k in plan.launch
    ]  # fmt: skip
    dyn: list[AddDynamicPartitionsRequest | DeleteDynamicPartitionsRequest] = []
    if plan.add_partitions:
        dyn.append(AddDynamicPartitionsRequest(JOB_PARTITIONS, plan.add_partitions))
    if plan.delete_partitions:
        dyn.append(DeleteDynamicPartitionsRequest(JOB_PARTITIONS, plan.delete_partitions))
    if not requests and not dyn and not plan.mark_failed and not plan.terminate:
        return SkipReason(f"{len(runs)} engine runs alive; nothing to do")
    context.log.info(
        f"engine keep-alive: launch {len(plan.launch)}, failed {len(plan.mark_failed)}, "
        f"stop {len(plan.terminate)}, partitions +{len(plan.add_partitions)} "
        f"-{len(plan.delete_partitions)}"
    )
    return SensorResult(run_requests=requests, dynamic_partitions_requests=dyn)


def stop_run(instance: DagsterInstance, run_id: str) -> None:
    """Cancel a run; one whose code server is gone (a previous ``dagster dev``) cannot be
    reached to cancel (DagsterUserCodeUnreachableError), so it is recorded as failed
    instead of failing every tick."""
    try:
        instance.run_coordinator.cancel_run(run_id)
    except DagsterError as e:
        run = instance.get_run_by_id(run_id)
        if run is not None:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            instance.report_run_failed(run, message=f"stopped: its code server is gone ({first})")
