"""Runner: one job partition, exactly once (seed 003's "Job Runner").

The loop: read a batch from the job's input partitions, run the job's logic on it, commit
it exactly once (``checkpoint``), snapshot now and then (``snapshotting``). On start,
``init_transactions`` fences any older runner of this partition (same ``transactional.id``)
and aborts its open transaction; then ``recovery`` brings the state up to the committed
offsets, and the runner consumes from there. ``run_forever`` wraps a runner in the retry
policy: transient failures are retried with backoff, permanent ones stop the partition and
are recorded in the registry.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import psycopg
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_when_event_set,
    wait_exponential,
)

from fennel_dagster.batch.pg_ingest import PostgresPoller
from fennel_dagster.batch.s3_ingest import S3Poller
from fennel_dagster.batch.spark import spark_session
from fennel_dagster.engine import chaining, kafka_clients
from fennel_dagster.engine.checkpoint import Checkpoint
from fennel_dagster.engine.failures import (
    Fenced,
    PermanentJobError,
    RecoveryError,
    StopRequested,
    TopicGone,
)
from fennel_dagster.engine.hangar import Hangar
from fennel_dagster.engine.isolation import poison_record, process_isolating
from fennel_dagster.engine.jobs.base import JobLogic
from fennel_dagster.engine.jobs.factory import build_job
from fennel_dagster.engine.messages import InMessage, Iteration, newest
from fennel_dagster.engine.metrics import runner_metrics
from fennel_dagster.engine.offline_writer import OfflineWriter
from fennel_dagster.engine.recovery import Recovery, open_state
from fennel_dagster.engine.restarts import RestartWatch, transient
from fennel_dagster.engine.rocks_tuning import RocksTuning
from fennel_dagster.engine.snapshots import SnapshotStore, Uploaded
from fennel_dagster.engine.snapshotting import Snapshotter
from fennel_dagster.metadata import registry, stream_stats
from fennel_dagster.metadata.db import connect
from fennel_dagster.metadata.registry import JobRow
from fennel_dagster.metadata.stream_stats import Progress
from fennel_dagster.ops.state import OverlayReader
from fennel_dagster.settings import Settings
from fennel_dagster.wire import plan

__all__ = [
    "Fenced", "PermanentJobError", "RecoveryError", "Runner", "RunnerStats", "run_forever",
    "state_path",
]  # fmt: skip

log = logging.getLogger("fennel_dagster.engine.runner")

TP = tuple[str, int]
# how long an idle runner waits for a first message before it ticks (snapshots, heartbeat)
IDLE_POLL_S = 0.1


@dataclass
class RunnerStats:
    batches: int = 0
    messages: int = 0
    outputs: int = 0
    errors: int = 0
    late: int = 0
    replayed_batches: int = 0
    replayed_messages: int = 0
    recovery_s: float = 0.0
    restored_snapshot: str | None = None
    snapshots: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def state_path(settings: Settings, owner: str, job: str, partition: int) -> Path:
    return settings.state_path / owner / job / f"p{partition}"


class Runner:
    def __init__(
        self,
        settings: Settings,
        job: JobRow,
        partition: int,
        owner: str,
        state_dir: Path | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        """``stop``: set when the runner is to stop before it runs (its inputs' topics are
        waited for here, and the wait ends with it)."""
        if isinstance(
            job.spec,
            plan.OfflineJobSpec | plan.S3SinkJobSpec | plan.HttpSinkJobSpec | plan.IngestFields,
        ):
            raise TypeError(f"{job.name} is a {job.kind} job, not a stream job")
        self.settings = settings
        self.job = job
        self.spec: plan.StreamJobSpec = job.spec
        self.partition = partition
        self.owner = owner
        self.stop = stop or threading.Event()  # recovery's waits end with it
        self.path = state_dir or state_path(settings, owner, job.name, partition)
        self.store = SnapshotStore(settings)
        self.stats = RunnerStats()
        self.metrics = runner_metrics()
        self.txn_id = f"{job.name}.p{partition}"
        # one consumer group per job partition: a broadcast (join) input is read by every
        # partition of the job, so their committed offsets must not overwrite each other
        self.group = f"{job.name}.p{partition}"
        try:
            self.logic: JobLogic = build_job(
                self.spec,
                lambda t: kafka_clients.topic_partitions(settings, t, job.name, stop=stop),
                settings.registry_auth,
            )
        except RecoveryError:
            raise
        except Exception as e:
            raise PermanentJobError(
                f"job {job.name} (of {job.spec.dataset.name}) cannot be built from its "
                f"committed spec: {type(e).__name__}: {e}"
            ) from e
        self.snapshotter = Snapshotter(
            self.store, job.name, partition, self.path, settings.engine_snapshot_interval_s,
            settings.engine_snapshots_kept, on_uploaded=self._count_snapshot,
        )  # fmt: skip
        self.snapshot_done = self.snapshotter.done
        self.snapshot_on_stop = True  # graceful stops leave a fresh snapshot for the next owner
        self.keep_state: Callable[[], bool] = lambda: True  # False: the job is being deleted
        # transactional ids of chains this partition may have run in (``chaining``), fenced
        # before it runs alone
        self.fences: list[str] = []
        self._unreported = Progress()  # what the next heartbeat reports (stream_stats)
        # the dataset's topic, whose rows are reported (an index job writes none)
        self._output = "" if isinstance(self.spec, plan.IndexJobSpec) else self.spec.output_topic

    def request_snapshot(self) -> None:
        """Ask the running loop (another thread) for a snapshot now; see ``snapshot_done``."""
        self.snapshotter.request()

    def run(
        self, stop: threading.Event | None = None, heartbeat: Callable[[], None] | None = None
    ) -> RunnerStats:
        stop = self.stop = stop or self.stop
        producer = kafka_clients.transactional_producer(self.settings, self.txn_id)
        try:
            producer.init_transactions(60)  # fences any older runner of this partition
        except KafkaException as e:
            raise Fenced(f"{self.txn_id}: init_transactions failed: {e}") from e
        kafka_clients.fence(self.settings, self.fences)  # and any chain it ran in
        hangar, self.stats.restored_snapshot = open_state(
            self.store, self.path, self.job.name, self.partition, RocksTuning.of(self.settings)
        )
        consumer = kafka_clients.consumer(self.settings, self.group)
        try:
            try:
                consumer.assign(self.recover(hangar, consumer))
            except StopRequested:  # told to stop while recovering: a clean stop
                log.info("runner %s p%d stopped during recovery", self.job.name, self.partition)
                return self.stats
            self.log_started()
            self._loop(stop, heartbeat, producer, consumer, hangar)
            self.snapshotter.join()
            if self.snapshot_on_stop and self.keep_state():
                self.snapshotter.now(hangar)
        finally:
            consumer.close()
            self.snapshotter.settle()  # a background checkpoint reads the hangar
            hangar.close()
        return self.stats

    def log_started(self, how: str = "") -> None:
        log.info("runner %s p%d started%s (recovery %.2fs, %s, replayed %d batches)",
                 self.job.name, self.partition, how, self.stats.recovery_s,
                 f"restored {self.stats.restored_snapshot}" if self.stats.restored_snapshot
                 else "local state", self.stats.replayed_batches)  # fmt: skip

    def recover(self, hangar: Hangar, consumer: Consumer) -> list[Any]:
        t0 = time.monotonic()
        recovery = Recovery(
            self.settings, self.job.name, self.partition, self.spec.replaylog, self.process,
            self.stop,
        )  # fmt: skip
        starts = recovery.run(hangar, consumer, self.logic.input_partitions(self.partition))
        self.stats.replayed_batches += recovery.replayed.batches
        self.stats.replayed_messages += recovery.replayed.messages
        self.stats.recovery_s = time.monotonic() - t0
        return starts

    def _loop(
        self,
        stop: threading.Event,
        heartbeat: Callable[[], None] | None,
        producer: Producer,
        consumer: Consumer,
        hangar: Hangar,
    ) -> None:
        last_beat = 0.0
        linger = self.settings.engine_txn_interval_ms / 1000
        most = self.settings.engine_batch_size
        while not stop.is_set():
            now = time.monotonic()
            if heartbeat is not None and now - last_beat > 2.0:
                self.measure_lag(consumer)
                heartbeat()
                last_beat = now
            # The batch starts with its first message and fills for ``linger`` at most (a
            # backlog fills it at once): an event waits one linger per hop, not a fixed tick.
            first = consumer.poll(IDLE_POLL_S)
            if first is None:
                self.snapshotter.tick(hangar)
                continue
            msgs = [first, *consumer.consume(most - 1, linger)] if most > 1 else [first]
            batch = [m for m in msgs if not m.error()]
            for m in msgs:
                err = m.error()
                if err is not None and err.code() != KafkaError._PARTITION_EOF:
                    log.warning("%s: consume error %s", self.txn_id, err)
            if batch:
                self._iterate(producer, consumer, hangar, batch)
            self.snapshotter.tick(hangar)

    def _iterate(
        self, producer: Producer, consumer: Consumer, hangar: Hangar, msgs: list[Message]
    ) -> None:
        started = time.monotonic()
        groups = by_partition(msgs)
        job = self.spec
        cp = Checkpoint(producer, consumer, hangar, self.partition, job.error_topic,
                        job.replaylog, self.txn_id)  # fmt: skip
        with cp.transaction():
            for group in groups.values():
                cp.stage(group, self.process(group, cp.reader))
        cp.apply()
        self.account(cp, len(msgs), started)

    def account(self, cp: Checkpoint, n_messages: int, started: float) -> None:
        """A committed batch of ``n_messages`` in the stats, metrics and the next heartbeat."""
        self.snapshotter.dirty = True
        self.stats.outputs += cp.counts.outputs
        self.stats.errors += cp.counts.errors
        self.stats.late += cp.counts.late
        self.stats.batches += 1
        self.stats.messages += n_messages
        metrics, part = self.metrics, str(self.partition)
        metrics.messages.labels(self.job.name, part).inc(n_messages)
        metrics.outputs.labels(self.job.name, part).inc(cp.counts.outputs)
        metrics.errors.labels(self.job.name, part).inc(cp.counts.errors)
        metrics.batch_seconds.labels(self.job.name).observe(time.monotonic() - started)
        u = self._unreported
        self._unreported = replace(u, messages=u.messages + n_messages,
                                   rows_out=u.rows_out + cp.counts.by_topic.get(self._output, 0),
                                   bad_rows=u.bad_rows + cp.counts.errors,
                                   newest_event_us=newest(u.newest_event_us,
                                                          cp.counts.newest_event_us))  # fmt: skip

    def take_progress(self) -> Progress:
        """What happened since the last call, and the lag last measured (for the heartbeat)."""
        out, self._unreported = self._unreported, Progress(lag=self._unreported.lag)
        return out

    def measure_lag(self, consumer: Consumer) -> None:
        """The input lag for the next report: unknown (None) until every input partition
        has fetched, so a runner is never reported caught up before it has read."""
        behind = kafka_clients.lag(consumer)
        gauge = self.metrics.lag.labels(self.job.name, str(self.partition))
        gauge.set(float("nan") if behind is None else behind)  # NaN: unknown, never 0
        self._unreported = replace(self._unreported, lag=behind)

    def process(self, msgs: list[InMessage], reader: OverlayReader) -> Iteration:
        name, ds = self.job.name, self.job.spec.dataset.name
        return process_isolating(self.logic.process, msgs, reader,
                                 lambda m, e: poison_record(name, ds, m, e),
                                 f"{name} (of {ds}) partition {self.partition}")  # fmt: skip

    def _count_snapshot(self, uploaded: Uploaded, seconds: float) -> None:
        self.stats.snapshots += 1
        self.metrics.snapshot_bytes.labels(self.job.name, str(self.partition)).inc(
            uploaded.stored_bytes
        )
        self.metrics.snapshot_seconds.labels(self.job.name).observe(seconds)


def by_partition(msgs: list[Message]) -> dict[TP, list[InMessage]]:
    """A batch's messages by topic partition, in order: each group is staged on its own."""
    groups: dict[TP, list[InMessage]] = {}
    for m in msgs:
        groups.setdefault((m.topic() or "", m.partition() or 0), []).append(
            kafka_clients.in_message(m)
        )
    return groups


# the longest a loop may go without beating (one batch) before its thread stops beating for
# it: a stuck loop then loses its lease, as a Kafka consumer that stops polling leaves its
# group after max.poll.interval.ms (5 min there too)
STALLED_AFTER_S = 300.0


@contextmanager
def beating_beside_loop(
    beat: Callable[[], None],
    alive: Callable[[], None] | None = None,
    every_s: float = 2.0,
    stalled_after_s: float = STALLED_AFTER_S,
) -> Iterator[Callable[[], None]]:
    """Yields the beat a job's loop calls between batches; meanwhile a thread beats
    ``alive`` (default ``beat``) every ``every_s``. Starting a job (a snapshot download, a
    replay, a Spark session) and one long batch (a first catch-up on a host busy starting
    tens of runs) both outlast the keep-alive's patience (``keepalive.DEAD_AFTER_S``); judged
    silent, such runs were failed and relaunched. The thread stops beating once the loop has
    not beaten for ``stalled_after_s``: liveness from a thread, progress bounded apart, as
    Kafka's consumers do (heartbeat thread, ``max.poll.interval.ms``)."""
    done = threading.Event()
    lock = threading.Lock()  # one beat at a time: they share a connection
    last_loop: list[float] = []  # when the loop last beat (empty: not yet)
    alive = alive or beat

    def ticking() -> None:
        while not done.wait(every_s):
            if last_loop and time.monotonic() - last_loop[0] > stalled_after_s:
                continue  # the loop is stuck: its lease lapses
            with lock:
                if done.is_set():
                    return
                try:
                    alive()
                except Exception as e:  # noqa: BLE001 - the job's own beat meets it too
                    log.debug("background heartbeat failed: %s", e)

    thread = threading.Thread(target=ticking, name="background-beats", daemon=True)
    thread.start()

    def loop_beat() -> None:
        with lock:
            last_loop[:] = [time.monotonic()]
            beat()

    try:
        yield loop_beat
    finally:
        done.set()
        thread.join(every_s + 10)


def run_forever(
    settings: Settings,
    job: JobRow,
    partition: int,
    owner: str,
    stop: threading.Event | None = None,
    home: str | None = None,
    partner: JobRow | None = None,
) -> str | None:
    """A runner with its heartbeat in Postgres, until ``stop`` or the job leaves the registry.
    With ``partner`` (a pipeline ``chaining`` fuses with the source ``job``), the two run as a
    chain (``engine.chain``), each beating, until either leaves; a chain that fails for good
    records nothing and returns the reason (its jobs then run alone, each saying for itself).

    Transient failures (Kafka, Postgres, S3, a missing topic) are retried with exponential
    backoff; the runner recovers from durable state each time. Any other failure repeated
    identically five times in quick succession is a restart loop (``restarts``). A permanent
    failure stops the partition: its reason is recorded in the registry
    (``registry.failures``) and returned.
    Returns None after a clean stop or a fencing. ``home`` names the state directory's
    owner when it is not the lease owner (Dagster runs: one per host, not one per run).
    """
    stop = stop or threading.Event()
    jobs = [job] if partner is None else [job, partner]
    # a job that left the registry: its prefixes are being destroyed
    removed = {j.hash: threading.Event() for j in jobs}

    live: list[Runner] = []  # the stream runners of this attempt, whose progress beats report

    def once() -> None:
        live.clear()
        with connect(settings, settings.pg_schema, autocommit=True) as conn:

            def beat(progress: bool = True) -> None:
                try:
                    with conn.pipeline():  # one round trip for the statements
                        for j in jobs:
                            registry.heartbeat_runner(conn, j.hash, partition, owner, os.getpid())
                        if progress:  # the loop's own: its counters, from its thread
                            for r in live:
                                stream_stats.report(conn, r.job.hash, partition,
                                                    r.take_progress())  # fmt: skip
                        exists = [registry.job_exists(conn, j.hash) for j in jobs]
                except psycopg.errors.ForeignKeyViolation:  # a job deleted during the beat
                    exists = [registry.job_exists(conn, j.hash) for j in jobs]
                for j, there in zip(jobs, exists, strict=True):
                    if not there:
                        log.info("%s.p%d: job removed from the registry; stopping", j.name,
                                 partition)  # fmt: skip
                        removed[j.hash].set()
                        stop.set()

            beat()
            if stop.is_set():  # removed (or told to stop) before it started
                return
            with beating_beside_loop(beat, lambda: beat(progress=False)) as loop_beat:
                if isinstance(job.spec, plan.OfflineJobSpec | plan.S3SinkJobSpec):
                    OfflineWriter(settings, job, owner).run(stop, loop_beat)
                elif isinstance(job.spec, plan.HttpSinkJobSpec):
                    from fennel_dagster.engine.http_sink import HttpDelivery  # httpx: its own

                    HttpDelivery(settings, job, partition).run(stop, loop_beat)
                elif isinstance(job.spec, plan.S3IngestJobSpec):
                    spark = spark_session(settings, app=job.name)
                    S3Poller(settings, job.spec, spark).run(stop, loop_beat)
                elif isinstance(job.spec, plan.PostgresIngestJobSpec):
                    spark = spark_session(settings, app=job.name)
                    PostgresPoller(settings, job.spec, spark).run(stop, loop_beat)
                elif partner is not None:
                    from fennel_dagster.engine.chain import ChainRunner  # it builds on Runner

                    chain = ChainRunner(settings, job, partner, partition, owner, stop)
                    live[:] = list(chain.runners)
                    for r in live:  # no snapshot into a deleted prefix
                        r.keep_state = _not(removed[r.job.hash])
                    chain.run(stop, loop_beat)
                else:
                    state_dir = state_path(settings, home, job.name, partition) if home else None
                    runner = Runner(settings, job, partition, owner, state_dir, stop)
                    live[:] = [runner]
                    runner.keep_state = _not(removed[job.hash])  # no snapshot into a deleted prefix
                    if job.kind in ("source", "pipeline"):
                        runner.fences = chaining.fenced_chains(
                            job, partition, registry.list_jobs(conn)
                        )
                    runner.run(stop, loop_beat)

    watch = RestartWatch(f"job {job.name} partition {partition}")
    outage: list[str] = []  # the transient fault being waited out, said once
    began = [time.monotonic()]

    def report(state: RetryCallState) -> None:
        e = state.outcome.exception() if state.outcome else None
        wait = state.next_action.sleep if state.next_action else 0.0
        if time.monotonic() - began[0] > 30:  # it ran a while: a new outage if any
            outage.clear()
        if e is not None and transient(e):
            if not outage:
                outage.append(type(e).__name__)
                log.warning("%s.p%d: %s unreachable (%s); retrying with backoff until it is back",
                            job.name, partition, _service(e), str(e).strip())  # fmt: skip
            return
        outage.clear()
        log.warning("%s.p%d: runner failed (%s); restarting in %.1fs", job.name, partition, e, wait)

    def attempt() -> None:
        watch.started()
        began[0] = time.monotonic()
        try:
            once()
        except (Fenced, PermanentJobError):
            raise
        except TopicGone:
            # a topic deleted under it: its job too, as a rule; if so it stops now, not after
            # a backoff (a job still registered waits for its topic with backoff)
            with connect(settings, settings.pg_schema, autocommit=True) as conn:
                for j in jobs:
                    if not registry.job_exists(conn, j.hash):
                        removed[j.hash].set()
                        stop.set()
            raise
        except Exception as e:
            watch.failed(e)  # a restart loop becomes a PermanentJobError
            raise

    retrying = Retrying(
        retry=retry_if_exception(_retryable),
        wait=wait_exponential(multiplier=0.5, max=10.0),
        stop=stop_when_event_set(stop),
        sleep=lambda seconds: None if stop.wait(seconds) else None,  # wakes on stop
        before_sleep=report,
        reraise=True,
    )
    try:
        retrying(attempt)
    except StopRequested:  # a wait that ended with ``stop`` outside a runner's own recovery
        log.info("%s.p%d: stopped while starting", job.name, partition)
    except Fenced:
        log.warning("%s.p%d: fenced; stopping", job.name, partition)
    except PermanentJobError as e:
        if partner is not None:  # which of the two: each says for itself when run alone
            log.error("chain of %s.p%d and %s: stopped (%s); they run alone from now on",
                      job.name, partition, partner.name, e)  # fmt: skip
            return str(e)
        log.error("%s.p%d: stopped for good: %s", job.name, partition, e)
        with connect(settings, settings.pg_schema, autocommit=True) as conn:
            try:
                registry.record_failure(conn, job.hash, partition, owner, str(e))
            except psycopg.errors.ForeignKeyViolation:  # its job was deleted meanwhile
                log.info("%s.p%d: its job left the registry; nothing to record", job.name,
                         partition)  # fmt: skip
        return str(e)
    except Exception as e:
        gone = [j.name for j in jobs if removed[j.hash].is_set()]
        if not gone:
            raise
        # its topics and prefixes were being destroyed under it (a transaction to a deleted
        # topic times out): nothing to retry or report; a chain's source runs on alone
        log.info("%s.p%d: stopped as %s left the registry (%s: %s)", job.name, partition,
                 ", ".join(gone), type(e).__name__, e)  # fmt: skip
    return None


def _not(event: threading.Event) -> Callable[[], bool]:
    return lambda: not event.is_set()


def _retryable(e: BaseException) -> bool:
    """Failures are retried; an interrupt (Ctrl-C, Dagster cancelling the run: not an
    ``Exception``), a fencing and a permanent failure end the runner."""
    return isinstance(e, Exception) and not isinstance(e, Fenced | PermanentJobError
                                                       | StopRequested)  # fmt: skip


def _service(e: BaseException) -> str:
    name = type(e).__module__
    return (
        "Postgres"
        if name.startswith("psycopg")
        else "Kafka"
        if "kafka" in name
        else ("S3" if name.startswith("botocore") else "a service")
    )
