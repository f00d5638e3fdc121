"""The compiled plan: the typed contract between the compiler and every executor.

``commit.compiler`` is the only producer. The asset bank stores each job's spec in the job
registry (encoded by ``wire.codec``), and the engine, lookups, the client, the mock, the
Dagster glue and (later) Spark read these types back through ``metadata.registry``. Nobody
re-derives a topic name, re-parses a dict or asks "which job serves this dataset?" twice:
the answer is a field here.

Job kinds, one dataclass each:
- ``SourceJobSpec``: a user's Kafka topic (or a webhook inbox) -> a dataset's topic;
- ``PipelineJobSpec``: a pipeline's operators, as one stage or two around a repartition
  topic (``Repartition``: the cut, its keys and the schema crossing it, precomputed);
- ``IndexJobSpec``: a keyed dataset's topic -> its as-of index;
- ``OfflineJobSpec``: a dataset's topic -> its offline (Delta) table on S3;
- ``S3IngestJobSpec``: new files under an S3 source's prefix -> the source's inbox topic
  (read by Spark), from which a ``SourceJobSpec`` applies the source's rules;
- ``PostgresIngestJobSpec``: a Postgres table's rows past its cursor -> the source's inbox
  (pulled by Spark over JDBC), likewise;
- ``KafkaSinkJobSpec``: a dataset's topic -> a ``@sink(Kafka(...).topic(t), cdc="debezium")``
  topic on the platform's own cluster, as Debezium JSON change events;
- ``S3SinkJobSpec``: a dataset's topic -> a ``@sink(S3(...).bucket(b, prefix=p,
  format="delta"), how="incremental")`` Delta table at ``s3://b/p`` on the platform's object
  store, written by the offline writer exactly as an offline table (its own kind, so nothing
  that looks for a dataset's offline table finds a sink's).
- ``HttpSinkJobSpec``: a ``@sink(HTTP(...).path(e), cdc="debezium")``: a ``KafkaSinkJobSpec``
  writes the changes to an outbox topic of the platform's, exactly once, and this job POSTs
  the outbox to the endpoint in batches, at least once (each change carries its outbox
  partition and offset, so the receiver can drop a repeat).
A job that answers lookups of a dataset says so in ``serves`` (exactly one per looked-up
dataset, chosen by the compiler).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal, TypeAlias

from fennel_dagster.wire.spec import (
    OMITTED_WHEN_DEFAULT,
    AggregateNode,
    DatasetSpec,
    FieldSpec,
    PipelineSpec,
    SinkSpec,
    SourceSpec,
)

JobKind = Literal[
    "source", "pipeline", "index", "offline", "s3_ingest", "pg_ingest", "kafka_sink", "s3_sink",
    "http_sink",
]  # fmt: skip


@dataclass(frozen=True)
class DatasetStream:
    """A dataset's topic as a job reads it: the rows on it are typed by ``dataset``."""

    dataset: DatasetSpec
    topic: str


@dataclass(frozen=True)
class WebhookInbox:
    """Rows logged to ``Webhook(name=webhook).endpoint(endpoint)`` land on ``topic``."""

    webhook: str
    endpoint: str
    topic: str
    partitions: int


@dataclass(frozen=True)
class SourceJobSpec:
    KIND: ClassVar[JobKind] = "source"

    name: str
    partitions: int
    dataset: DatasetSpec
    source: SourceSpec
    output_topic: str
    error_topic: str
    replaylog: str
    external_topic: str  # the user's Kafka topic, or the webhook inbox topic
    webhook: WebhookInbox | None = None


@dataclass(frozen=True)
class Repartition:
    """Stage 1 runs the DAG up to ``cut`` and writes its rows to ``topic`` keyed by ``keys``;
    stage 2 reads them (typed by ``schema``) and runs the rest from ``cut``."""

    topic: str
    keys: tuple[str, ...]
    cut: str
    schema: tuple[FieldSpec, ...]


@dataclass(frozen=True)
class AggregateServing:
    """Lookups of the job's dataset assemble this continuous aggregate's windows from the
    job's state at the lookup's timestamp (so a 7-day sum decays between events)."""

    scope: str  # the state namespace scope: "<dataset>.<pipeline>"
    node: AggregateNode


@dataclass(frozen=True)
class PipelineJobSpec:
    KIND: ClassVar[JobKind] = "pipeline"

    name: str
    partitions: int
    dataset: DatasetSpec  # the dataset the pipeline writes
    pipeline: PipelineSpec
    inputs: tuple[DatasetStream, ...]  # streamed inputs, partition p of each
    lookups: tuple[DatasetStream, ...]  # joined datasets, every partition (broadcast)
    output_topic: str
    error_topic: str
    replaylog: str
    stateful: bool
    repartition: Repartition | None = None
    serves: AggregateServing | None = None


@dataclass(frozen=True)
class IndexJobSpec:
    KIND: ClassVar[JobKind] = "index"

    name: str
    partitions: int
    dataset: DatasetSpec
    input_topic: str
    error_topic: str
    replaylog: str


@dataclass(frozen=True)
class KafkaSinkJobSpec:
    """Writes every change of ``dataset`` (read from its topic, ``input_topic``) to the
    sink's topic ``output_topic`` as one Debezium JSON change event each, in the same Kafka
    transaction as the input offsets: exactly once, which is why the sink topic must live on
    the platform's own cluster (``commit.executable``). Partition ``p`` reads partition ``p``
    of the dataset topic; a keyed dataset's job keeps each key's current row in its state
    (the events' ``before``)."""

    KIND: ClassVar[JobKind] = "kafka_sink"

    name: str
    partitions: int
    dataset: DatasetSpec
    sink: SinkSpec
    input_topic: str
    output_topic: str  # the sink's topic (the user's), or an HTTP sink's outbox (the platform's)
    error_topic: str
    replaylog: str


@dataclass(frozen=True)
class OfflineTable:
    """A dataset's offline table: a Delta table under ``prefix`` of the platform's bucket
    (one per physical version), partitioned by event date, kept ``dataset.history``. An S3
    sink's table names its own ``bucket`` on the platform's object store (empty: the
    platform's bucket; omitted from the encoding then, so offline jobs keep their hashes)."""

    dataset: DatasetSpec
    prefix: str  # the object-store key prefix (an offline table's: namespace included, "/" last)
    bucket: str = field(default="", metadata=OMITTED_WHEN_DEFAULT)


@dataclass(frozen=True)
class OfflineJobSpec:
    """Writes every row of ``input_topic`` into ``table`` exactly once: one writer (one
    partition) reads all of the topic's partitions, and each Delta commit records the
    offsets it covers as Delta app transactions."""

    KIND: ClassVar[JobKind] = "offline"

    name: str
    partitions: int
    table: OfflineTable
    input_topic: str
    error_topic: str = ""  # the dataset's: rows the writer cannot type go there, not to a stop

    @property
    def dataset(self) -> DatasetSpec:
        return self.table.dataset


@dataclass(frozen=True)
class S3SinkJobSpec:
    """Writes every row of ``input_topic`` into the sink's Delta ``table`` (its ``bucket`` and
    prefix) exactly once, as ``OfflineJobSpec`` does the dataset's offline table: one writer
    reads all of the topic's partitions and each commit records the offsets it covers. The
    table is the user's: the platform neither creates its bucket nor expires its rows."""

    KIND: ClassVar[JobKind] = "s3_sink"

    name: str
    partitions: int
    table: OfflineTable
    sink: SinkSpec
    input_topic: str
    error_topic: str = ""  # as OfflineJobSpec's

    @property
    def dataset(self) -> DatasetSpec:
        return self.table.dataset


@dataclass(frozen=True)
class HttpSinkJobSpec:
    """POSTs an HTTP sink's outbox (``input_topic``: the Debezium change events a
    ``KafkaSinkJobSpec`` wrote there exactly once) to the sink's endpoint, up to ``limit``
    changes a request, retrying until the endpoint takes them; offsets are committed after
    a request succeeds (at least once). Partition ``p`` delivers outbox partition ``p``, so
    one key's changes arrive in order."""

    KIND: ClassVar[JobKind] = "http_sink"

    name: str
    partitions: int
    dataset: DatasetSpec
    sink: SinkSpec
    input_topic: str
    error_topic: str  # the dataset's: where the changes the endpoint refuses go


@dataclass(frozen=True)
class IngestFields:
    """What every source Spark reads has: the rows go to ``inbox_topic`` (read by the
    source's ``SourceJobSpec``), what was sent to ``ledger_topic`` in the same transaction."""

    name: str
    partitions: int
    dataset: DatasetSpec
    source: SourceSpec
    inbox_topic: str
    inbox_partitions: int
    ledger_topic: str
    error_topic: str


@dataclass(frozen=True)
class S3IngestJobSpec(IngestFields):
    """Polls ``source``'s S3 prefix (every ``source.every``) and sends each new file's rows to
    the inbox once, recording the file on the ledger in the same transaction."""

    KIND: ClassVar[JobKind] = "s3_ingest"


@dataclass(frozen=True)
class PostgresIngestJobSpec(IngestFields):
    """Pulls ``source``'s table (every ``source.every``) by its cursor column: the rows past
    the last cursor go to the inbox with the new cursor on the ledger, in one transaction
    per chunk of whole cursor values."""

    KIND: ClassVar[JobKind] = "pg_ingest"


# Kafka in and out
StreamJobSpec: TypeAlias = SourceJobSpec | PipelineJobSpec | IndexJobSpec | KafkaSinkJobSpec
IngestJobSpec: TypeAlias = S3IngestJobSpec | PostgresIngestJobSpec  # Spark reads, Kafka out
JobSpec: TypeAlias = (
    StreamJobSpec | OfflineJobSpec | S3SinkJobSpec | HttpSinkJobSpec | IngestJobSpec
)
JOB_SPECS: tuple[type[JobSpec], ...] = (
    SourceJobSpec,
    PipelineJobSpec,
    IndexJobSpec,
    OfflineJobSpec,
    S3IngestJobSpec,
    PostgresIngestJobSpec,
    KafkaSinkJobSpec,
    S3SinkJobSpec,
    HttpSinkJobSpec,
)


def snapshot_prefix(job: str) -> str:
    """Where a stream job's state snapshots live, under the namespace's root in the bucket:
    the bank creates and destroys this prefix, runners write under it (one name, one place)."""
    return f"snapshots/{job}/"


def serves_dataset(job: JobSpec) -> str | None:
    """The dataset whose lookups this job answers (None: it answers none)."""
    if isinstance(job, IndexJobSpec):
        return job.dataset.name
    if isinstance(job, PipelineJobSpec) and job.serves is not None:
        return job.dataset.name
    return None


def read_topics(job: JobSpec) -> tuple[str, ...]:
    """Every topic the job consumes (for lag and health reports)."""
    if isinstance(job, SourceJobSpec):
        return (job.external_topic,)
    if isinstance(
        job, IndexJobSpec | OfflineJobSpec | KafkaSinkJobSpec | S3SinkJobSpec | HttpSinkJobSpec
    ):
        return (job.input_topic,)
    if isinstance(job, IngestFields):
        return ()
    own = (job.repartition.topic,) if job.repartition is not None else ()
    return tuple(s.topic for s in (*job.inputs, *job.lookups)) + own
