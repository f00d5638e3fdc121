"""A barrier over a branch's stream jobs: ``client.sleep()`` returns once every job has
processed everything logged before the call.

Each job partition consumes input topic partitions in its own consumer group
(``<job>.p<partition>``) and commits the offsets it processed in its Kafka transaction. The
barrier takes, at call time, the last stable offset of every topic the branch's jobs read
from outside (webhook inboxes, users' topics, ingest inboxes), and waits until each job
partition's committed offset reaches it. A topic another job of the branch writes (a dataset
topic, a repartition topic, a sink's outbox) gets its target only once every job writing it
has caught up, so the barrier follows the rows through the whole graph.

A committed offset is the last processed message's plus one, and a transactional topic
ends with commit markers a consumer never processes: a partition whose committed offset is
below its target is caught up when no committed data message lies between the two (read
``read_committed`` from the committed offset). A partition that has committed nothing is
not caught up while its input holds data below the target.

The offline writers (offline tables, S3 sinks: Delta app transactions, no consumer group)
are not waited for.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from fennel_dagster.engine.lookup_client import Routes
from fennel_dagster.errors import EngineError
from fennel_dagster.metadata.registry import JobRow
from fennel_dagster.settings import Settings
from fennel_dagster.wire import plan

TP = tuple[str, int]
Unit = tuple[str, int]  # (job name, partition)

# the jobs that consume in consumer groups named <job>.p<partition>
GROUPED = (
    plan.SourceJobSpec,
    plan.PipelineJobSpec,
    plan.IndexJobSpec,
    plan.KafkaSinkJobSpec,
    plan.HttpSinkJobSpec,
)
DEFAULT_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Behind:
    """One input partition of one job partition that has not caught up."""

    job: str
    partition: int
    topic: str
    topic_partition: int
    committed: int | None  # None: the job partition has committed nothing there
    target: int | None  # None: not known yet (an upstream job is behind)

    def describe(self) -> str:
        at = "nothing processed" if self.committed is None else f"at offset {self.committed}"
        goal = "upstream still behind" if self.target is None else f"target {self.target}"
        return f"{self.job} p{self.partition} on {self.topic}[{self.topic_partition}]: {at}, {goal}"


class BarrierTimeout(EngineError, TimeoutError):
    """``sleep`` ran out of time: the message (and ``behind``) name what had not caught up."""

    def __init__(self, message: str, behind: Sequence[Behind] = ()) -> None:
        super().__init__(message)
        self.behind = list(behind)

    @classmethod
    def of(cls, timeout: float, behind: Sequence[Behind]) -> BarrierTimeout:
        shown = "; ".join(b.describe() for b in behind[:10])
        more = f" (and {len(behind) - 10} more)" if len(behind) > 10 else ""
        return cls(
            f"sleep: the branch's jobs did not process everything logged before the call "
            f"within {timeout:g}s; behind: {shown}{more}. Check the engine runs these jobs "
            "(fennel-dagster engine) or give sleep a longer timeout",
            behind,
        )


def sleep_timeout(seconds: float | None, timeout: float | None) -> float:
    """``sleep(seconds)``, Fennel's fixed wait, is the least time the barrier may take
    before it gives up; ``timeout`` overrides."""
    if timeout is not None:
        if timeout <= 0:
            raise ValueError(f"sleep: timeout must be positive seconds, not {timeout!r}")
        return float(timeout)
    return max(DEFAULT_TIMEOUT_S, float(seconds or 0))


def unserved(jobs: Iterable[JobRow], routes: Routes) -> list[str]:
    """The partitions of ``jobs``' stream jobs (sources, pipelines, indexes, sinks) no live
    engine runs yet (``job pN``): a lookup of a serving one meets 503, rows logged to a
    source wait."""
    return [
        f"{j.name} p{p}"
        for j in jobs
        if isinstance(j.spec, GROUPED)
        for p in range(j.partitions)
        if (j.hash, p) not in routes.address
    ]


@dataclass
class BarrierReport:
    jobs: int
    partitions: int
    waited_s: float
    targets: dict[TP, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {"caught_up": True, "jobs": self.jobs, "partitions": self.partitions,
                "waited_s": round(self.waited_s, 3)}  # fmt: skip


def consumed_topics(job: JobRow) -> list[str]:
    s = job.spec
    if isinstance(s, plan.SourceJobSpec):
        return [s.external_topic]
    if isinstance(s, plan.PipelineJobSpec):
        own = [s.repartition.topic] if s.repartition is not None else []
        return [*(i.topic for i in s.inputs), *own, *(lk.topic for lk in s.lookups)]
    if isinstance(s, plan.IndexJobSpec | plan.KafkaSinkJobSpec | plan.HttpSinkJobSpec):
        return [s.input_topic]
    return []


def produced_topics(job: JobRow) -> list[str]:
    s = job.spec
    if isinstance(s, plan.PipelineJobSpec):
        return [s.output_topic, *([s.repartition.topic] if s.repartition is not None else [])]
    if isinstance(s, plan.SourceJobSpec | plan.KafkaSinkJobSpec):
        return [s.output_topic]
    if isinstance(s, plan.S3IngestJobSpec | plan.PostgresIngestJobSpec):
        return [s.inbox_topic]
    return []


def input_partitions(job: JobRow, partition: int, count: Callable[[str], int]) -> list[TP]:
    """What job partition ``partition`` consumes: the engine's jobs' own rules
    (``engine.jobs``), from the spec alone."""
    s = job.spec
    if isinstance(s, plan.SourceJobSpec):
        n = count(s.external_topic)
        return [(s.external_topic, q) for q in range(n) if q % s.partitions == partition]
    if isinstance(s, plan.PipelineJobSpec):
        mine = [i.topic for i in s.inputs]
        if s.repartition is not None:
            mine.append(s.repartition.topic)
        return [(t, partition) for t in mine] + [
            (lk.topic, q) for lk in s.lookups for q in range(s.partitions)
        ]
    if isinstance(s, plan.IndexJobSpec | plan.KafkaSinkJobSpec | plan.HttpSinkJobSpec):
        return [(s.input_topic, partition)]
    return []


class Barrier:
    """Wait until the stream jobs among ``jobs`` have processed what their inputs held when
    ``wait`` was called."""

    def __init__(self, settings: Settings, jobs: Iterable[JobRow]) -> None:
        self.settings = settings
        self.all_jobs = list(jobs)
        self.jobs = [j for j in self.all_jobs if isinstance(j.spec, GROUPED)]
        self._caught: set[tuple[str, int, int, int]] = set()  # (topic, p, start, target)

    def wait(self, timeout: float = DEFAULT_TIMEOUT_S, poll_s: float = 0.1) -> BarrierReport:
        t0 = time.monotonic()
        deadline = t0 + timeout
        admin = AdminClient({"bootstrap.servers": self.settings.kafka_servers})
        counts = self._partition_counts(admin)
        units: dict[Unit, list[TP]] = {
            (j.name, p): input_partitions(j, p, lambda t: counts.get(t, 0))
            for j in self.jobs
            for p in range(j.partitions)
        }
        writers: dict[str, set[str]] = {}
        for j in self.all_jobs:
            for t in produced_topics(j):
                writers.setdefault(t, set()).add(j.name)
        consumed = {t for tps in units.values() for t, _ in tps}
        # outside inputs: their ends at call time are the targets
        targets = self._ends(admin, [(t, q) for t in consumed if t not in writers
                                     for q in range(counts.get(t, 0))])  # fmt: skip
        done: set[Unit] = set()
        first_phase: set[Unit] = set()  # caught up on every input but its own topics
        probe = self._probe_consumer()
        try:
            while True:
                progress = True
                while progress:
                    progress = False
                    pending = [u for u in units if u not in done]
                    committed = self._committed(admin, {u: units[u] for u in pending})
                    status = self._check(probe, pending, units, committed, targets, writers)
                    for u, (own_ok, all_ok) in status.items():
                        if all_ok:
                            done.add(u)
                        if own_ok:
                            first_phase.add(u)
                    newly = self._ready_topics(consumed, writers, targets, done, first_phase,
                                               counts)  # fmt: skip
                    if newly:
                        targets.update(self._ends(admin, newly))
                        progress = True
                if len(done) == len(units):
                    return BarrierReport(len(self.jobs), len(units), time.monotonic() - t0,
                                         targets)  # fmt: skip
                if time.monotonic() > deadline:
                    raise BarrierTimeout.of(timeout, self._behind(units, done, committed, targets))
                time.sleep(poll_s)
        finally:
            probe.close()

    # ------------------------------------------------------------------ steps

    def _ready_topics(
        self,
        consumed: set[str],
        writers: dict[str, set[str]],
        targets: dict[TP, int],
        done: set[Unit],
        first_phase: set[Unit],
        counts: dict[str, int],
    ) -> list[TP]:
        """Partitions of written topics whose writers have all caught up (a job reading its
        own topic, a repartition, counts once it caught up on its other inputs)."""
        ready: list[TP] = []
        jobs = {j.name: j for j in self.jobs}
        for t in consumed:
            if t not in writers or (t, 0) in targets:
                continue
            ok = True
            for w in writers[t]:
                job = jobs.get(w)
                if job is None:
                    continue  # an ingest job: polled from outside, its inbox as it is now
                needed = first_phase if t in consumed_topics(job) else done
                if any((w, p) not in needed for p in range(job.partitions)):
                    ok = False
                    break
            if ok:
                ready += [(t, q) for q in range(counts.get(t, 0))]
                if counts.get(t, 0) == 0:
                    targets[(t, 0)] = 0  # an absent topic holds nothing
        return ready

    def _check(
        self,
        probe: Consumer,
        pending: list[Unit],
        units: dict[Unit, list[TP]],
        committed: dict[Unit, dict[TP, int | None]],
        targets: dict[TP, int],
        writers: dict[str, set[str]],
    ) -> dict[Unit, tuple[bool, bool]]:
        """Per pending unit: (caught up on its inputs but its own topics, on all of them)."""
        to_probe: dict[tuple[str, int, int, int], None] = {}
        for u in pending:
            for tp in units[u]:
                target = targets.get(tp)
                c = committed[u].get(tp)
                if target is not None and not (c is not None and c >= target):
                    key = (tp[0], tp[1], c if c is not None else OFFSET_BEGINNING, target)
                    if key not in self._caught and target > 0:
                        to_probe[key] = None
        self._probe(probe, list(to_probe))
        out: dict[Unit, tuple[bool, bool]] = {}
        for u in pending:
            own_ok = all_ok = True
            for tp in units[u]:
                ok = self._caught_up(tp, committed[u].get(tp), targets.get(tp))
                all_ok &= ok
                if u[0] not in writers.get(tp[0], ()):
                    own_ok &= ok
            out[u] = (own_ok, all_ok)
        return out

    def _caught_up(self, tp: TP, c: int | None, target: int | None) -> bool:
        if target is None:
            return False
        if target <= 0 or (c is not None and c >= target):
            return True
        return (tp[0], tp[1], c if c is not None else OFFSET_BEGINNING, target) in self._caught

    def _behind(
        self,
        units: dict[Unit, list[TP]],
        done: set[Unit],
        committed: dict[Unit, dict[TP, int | None]],
        targets: dict[TP, int],
    ) -> list[Behind]:
        out = []
        for u in sorted(set(units) - done):
            for tp in units[u]:
                c = committed.get(u, {}).get(tp)
                if not self._caught_up(tp, c, targets.get(tp)):
                    out.append(Behind(u[0], u[1], tp[0], tp[1], c, targets.get(tp)))
        return out

    # ------------------------------------------------------------------ Kafka

    def _partition_counts(self, admin: AdminClient) -> dict[str, int]:
        topics = {t for j in self.jobs for t in consumed_topics(j)}
        md = admin.list_topics(timeout=10).topics
        return {t: len(md[t].partitions) for t in topics
                if t in md and md[t].error is None}  # fmt: skip

    def _ends(self, admin: AdminClient, tps: list[TP]) -> dict[TP, int]:
        """Each partition's last stable offset: the end of what is committed to it now."""
        if not tps:
            return {}
        futures = admin.list_offsets(
            {TopicPartition(t, q): OffsetSpec.latest() for t, q in tps},
            isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=30,
        )  # fmt: skip
        return {(tp.topic, tp.partition): int(f.result().offset) for tp, f in futures.items()}

    def _committed(
        self, admin: AdminClient, pending: dict[Unit, list[TP]]
    ) -> dict[Unit, dict[TP, int | None]]:
        futures = {
            u: admin.list_consumer_group_offsets(
                [
                    ConsumerGroupTopicPartitions(
                        f"{u[0]}.p{u[1]}", [TopicPartition(t, q) for t, q in tps]
                    )
                ],
                request_timeout=30,
            )  # fmt: skip
            for u, tps in pending.items()
            if tps
        }
        out: dict[Unit, dict[TP, int | None]] = {u: {} for u in pending}
        for u, fs in futures.items():
            for f in fs.values():
                for tp in f.result().topic_partitions:
                    out[u][(tp.topic, tp.partition)] = tp.offset if tp.offset >= 0 else None
        return out

    def _probe_consumer(self) -> Consumer:
        return Consumer({
            "bootstrap.servers": self.settings.kafka_servers, "group.id": "fennel-barrier-probe",
            "enable.auto.commit": False, "isolation.level": "read_committed",
            "enable.partition.eof": True, "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 50,
        })  # fmt: skip

    def _probe(self, consumer: Consumer, keys: list[tuple[str, int, int, int]]) -> None:
        """Read each (topic, partition) from ``start``: caught up (into ``_caught``) when no
        committed data message lies before ``target``. One start per partition a round."""
        while keys:
            batch: dict[TP, tuple[str, int, int, int]] = {}
            rest = []
            for k in keys:
                if (k[0], k[1]) in batch:
                    rest.append(k)
                else:
                    batch[(k[0], k[1])] = k
            keys = rest
            consumer.assign([TopicPartition(t, q, k[2]) for (t, q), k in batch.items()])
            open_ = set(batch)
            until = time.monotonic() + 3.0
            while open_ and time.monotonic() < until:
                m = consumer.poll(0.2)
                if m is None:
                    continue
                tp = (m.topic() or "", m.partition() or 0)
                if tp not in open_:
                    continue
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        self._caught.add(batch[tp])
                        open_.discard(tp)
                    elif err.code() not in (KafkaError.UNKNOWN_TOPIC_OR_PART,):
                        raise KafkaException(err)
                    continue
                if (m.offset() or 0) >= batch[tp][3]:
                    self._caught.add(batch[tp])
                open_.discard(tp)
            consumer.unassign()
