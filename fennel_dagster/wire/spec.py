"""The intermediate representation of every declared entity.

The declaration API (``fennel_dagster.declare``) produces these frozen dataclasses; the
definition server, both executors (engine batches and Spark) and the mock client consume
them. They are plain data: no user objects, no callables, only names, types, expressions
and user code as text, so that ``wire.codec`` can turn them into canonical bytes.

Conventions:
- durations are whole seconds (``int``); "forever" is ``None`` where a field allows it;
- sequences are tuples, mappings are tuples of ``(key, value)`` pairs sorted by key,
  so that equal declarations are equal values with equal bytes;
- entities refer to each other by name (``Dataset``/``Featureset.feature``), never by object.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, TypeAlias

WIRE_VERSION = 1

# --------------------------------------------------------------------------- types


@dataclass(frozen=True)
class IntType:
    pass


@dataclass(frozen=True)
class FloatType:
    pass


@dataclass(frozen=True)
class BoolType:
    pass


@dataclass(frozen=True)
class StringType:
    pass


@dataclass(frozen=True)
class BytesType:
    pass


@dataclass(frozen=True)
class TimestampType:
    """A timezone-aware instant (UTC), microsecond precision."""


@dataclass(frozen=True)
class DateType:
    pass


@dataclass(frozen=True)
class DecimalType:
    scale: int


@dataclass(frozen=True)
class OptionalType:
    of: DType


@dataclass(frozen=True)
class ListType:
    of: DType


@dataclass(frozen=True)
class MapType:
    """``Dict[str, of]``: keys are always strings, as in Fennel."""

    of: DType


@dataclass(frozen=True)
class EmbeddingType:
    dim: int


@dataclass(frozen=True)
class StructField:
    name: str
    dtype: DType


@dataclass(frozen=True)
class StructType:
    name: str
    fields: tuple[StructField, ...]


@dataclass(frozen=True)
class BetweenType:
    """A restriction: ``of`` (int or float) within ``[min, max]`` (or open ends if strict)."""

    of: DType
    min: float
    max: float
    strict_min: bool = False
    strict_max: bool = False


@dataclass(frozen=True)
class OneOfType:
    of: DType
    options: tuple[int | str, ...]


@dataclass(frozen=True)
class RegexType:
    pattern: str


DType: TypeAlias = (
    IntType
    | FloatType
    | BoolType
    | StringType
    | BytesType
    | TimestampType
    | DateType
    | DecimalType
    | OptionalType
    | ListType
    | MapType
    | EmbeddingType
    | StructType
    | BetweenType
    | OneOfType
    | RegexType
)

WINDOW_FIELD = "window"
"""The key column of ``groupby(..., window=...)``: the window a row aggregates, as Fennel names it."""
WINDOW_TYPE = StructType(
    "Window", (StructField("begin", TimestampType()), StructField("end", TimestampType()))
)
"""Fennel's ``Window`` struct: the events in ``[begin, end)``."""

# --------------------------------------------------------------------------- expressions


@dataclass(frozen=True)
class Col:
    name: str


@dataclass(frozen=True)
class Lit:
    """A literal; ``value`` is JSON-representable (datetimes as ISO strings + dtype)."""

    value: None | bool | int | float | str
    dtype: DType | None = None


@dataclass(frozen=True)
class Call:
    """A named function applied to arguments.

    ``fn`` is one of a closed registry shared by both executors: arithmetic (``add``, ``sub``,
    ``mul``, ``truediv``, ``floordiv``, ``mod``, ``pow``, ``neg``), comparison (``eq``, ``ne``,
    ``lt``, ``le``, ``gt``, ``ge``), boolean (``and``, ``or``, ``not``), ``isnull``, ``fillnull``,
    ``astype`` (target in ``dtype``), and the namespaces ``str.*``, ``dt.*``, ``num.*``,
    ``list.*``, ``struct.*``. Non-expression parameters (a format string, a unit) are ``Lit`` args.
    """

    fn: str
    args: tuple[Expr, ...]
    dtype: DType | None = None


@dataclass(frozen=True)
class Var:
    """The item variable of a list lambda: ``var("x")`` inside ``list.map("x", ...)`` or
    ``list.filter("x", ...)``, bound to each item of the list in turn (not a column)."""

    name: str


def var_key(name: str) -> str:
    """Where a lambda's variable is held beside the columns while its body is typed or
    evaluated (a key no column name takes)."""
    return f"\x00var:{name}"


@dataclass(frozen=True)
class When:
    """``when(c1).then(v1).when(c2).then(v2).otherwise(v)``."""

    cases: tuple[tuple[Expr, Expr], ...]
    otherwise: Expr


Expr: TypeAlias = Col | Lit | Call | When | Var

# --------------------------------------------------------------------------- user code


@dataclass(frozen=True)
class UserCode:
    """A user function shipped as source text (never as a pickle) so its bytes are canonical.

    ``source`` is the dedented function (or the lambda expression alone); ``entrypoint`` is the
    name to call after executing ``preamble`` (the defining module's import lines and any
    ``@includes`` helpers) followed by ``source``. For a lambda, ``entrypoint`` is empty and
    ``source`` is the ``lambda ...`` expression.
    """

    source: str
    entrypoint: str = ""
    preamble: str = ""


# --------------------------------------------------------------------------- schemas


@dataclass(frozen=True)
class FieldSpec:
    name: str
    dtype: DType
    key: bool = False
    timestamp: bool = False
    description: str = ""


@dataclass(frozen=True)
class MetaSpec:
    owner: str = ""
    description: str = ""
    tags: tuple[str, ...] = ()
    deleted: bool = False


# --------------------------------------------------------------------------- windows & aggregations

WindowKind = Literal["continuous", "tumbling", "hopping", "session", "forever"]


@dataclass(frozen=True)
class WindowSpec:
    """``continuous``: trailing ``duration`` (``forever``: no bound); ``tumbling``/``hopping``:
    fixed windows of ``duration`` every ``stride`` (tumbling: stride == duration), shifted by
    ``lookback``; ``session``: closed after ``gap`` of inactivity."""

    kind: WindowKind
    duration: int | None = None
    stride: int | None = None
    gap: int | None = None
    lookback: int = 0


AggKind = Literal[
    "count",
    "sum",
    "avg",
    "min",
    "max",
    "lastk",
    "firstk",
    "distinct",
    "stddev",
    "quantile",
    "exp_decay",
]


@dataclass(frozen=True)
class AggSpec:
    kind: AggKind
    into: str
    window: WindowSpec
    of: str | None = None
    unique: bool = False  # count
    approx: bool = False  # count(unique), quantile
    limit: int | None = None  # lastk / firstk
    dedup: bool = False  # lastk / firstk
    dropnull: bool = False  # lastk / firstk / distinct
    default: None | bool | int | float | str = None  # min/max/avg/stddev/quantile on empty
    p: float | None = None  # quantile
    # exp_decay: seconds for a value to decay to half; left out of the encoding while None
    # (the metadata is OMITTED_WHEN_DEFAULT, defined further down)
    half_life: int | None = field(default=None, metadata={"wire": "omitted when default"})
    # avg of a Decimal[scale] column: the scale, so the mean is the exact decimal mean (as
    # Fennel's) rather than the mean of the values as floats; left out of the encoding while None
    decimal_scale: int | None = field(default=None, metadata={"wire": "omitted when default"})


# --------------------------------------------------------------------------- operators


@dataclass(frozen=True)
class InputNode:
    id: str
    dataset: str


@dataclass(frozen=True)
class FilterNode:
    id: str
    input: str
    predicate: Expr | None = None
    code: UserCode | None = None


@dataclass(frozen=True)
class AssignColumn:
    name: str
    dtype: DType
    expr: Expr | None = None
    code: UserCode | None = None


@dataclass(frozen=True)
class AssignNode:
    id: str
    input: str
    columns: tuple[AssignColumn, ...]


@dataclass(frozen=True)
class TransformNode:
    id: str
    input: str
    code: UserCode
    schema: tuple[FieldSpec, ...]


@dataclass(frozen=True)
class JoinNode:
    """Left join (or inner) of a stream against a keyed dataset, as of each left row's time."""

    id: str
    input: str
    right: str  # dataset name
    how: Literal["left", "inner"]
    left_on: tuple[str, ...]
    right_on: tuple[str, ...]
    within_before: int | None = None  # None: forever
    within_after: int = 0
    fields: tuple[str, ...] = ()  # right fields to bring in; empty: all non-key, non-ts


@dataclass(frozen=True)
class AggregateNode:
    id: str
    input: str
    keys: tuple[str, ...]
    aggs: tuple[AggSpec, ...]
    emit: Literal["eager", "final"] = "eager"
    along: str | None = None  # alternative timestamp field to window on
    # ``groupby(..., window=...)``: the window is a key of the output (its ``window`` column,
    # a ``Window`` struct), and every aggregation (there may be none) runs over it; left out of
    # the encoding while None (the metadata is OMITTED_WHEN_DEFAULT, defined further down)
    window: WindowSpec | None = field(default=None, metadata={"wire": "omitted when default"})

    @property
    def windowed_by(self) -> WindowSpec | None:
        """The window the node runs over: the groupby's, or else its first aggregation's (a
        node's aggregations share one kind of window: inference holds them to it)."""
        if self.window is not None:
            return self.window
        return self.aggs[0].window if self.aggs else None


@dataclass(frozen=True)
class FirstNode:
    id: str
    input: str
    keys: tuple[str, ...]


@dataclass(frozen=True)
class LatestNode:
    id: str
    input: str
    keys: tuple[str, ...]


@dataclass(frozen=True)
class DedupNode:
    id: str
    input: str
    by: tuple[str, ...]  # empty: all fields
    window: WindowSpec | None = None  # tumbling or session; None: exact-duplicate timestamp


@dataclass(frozen=True)
class ExplodeNode:
    id: str
    input: str
    columns: tuple[str, ...]


@dataclass(frozen=True)
class DropNode:
    id: str
    input: str
    columns: tuple[str, ...]


@dataclass(frozen=True)
class DropNullNode:
    id: str
    input: str
    columns: tuple[str, ...]  # empty: every optional column


@dataclass(frozen=True)
class SelectNode:
    id: str
    input: str
    columns: tuple[str, ...]


@dataclass(frozen=True)
class RenameNode:
    id: str
    input: str
    mapping: tuple[tuple[str, str], ...]  # (old, new), sorted by old


@dataclass(frozen=True)
class UnionNode:
    id: str
    inputs: tuple[str, ...]


@dataclass(frozen=True)
class ChangelogNode:
    """Turns a keyed dataset's upserts into an append stream with a ``delete_column`` flag."""

    id: str
    input: str
    delete_column: str


Node: TypeAlias = (
    InputNode
    | FilterNode
    | AssignNode
    | TransformNode
    | JoinNode
    | AggregateNode
    | FirstNode
    | LatestNode
    | DedupNode
    | ExplodeNode
    | DropNode
    | DropNullNode
    | SelectNode
    | RenameNode
    | UnionNode
    | ChangelogNode
)


@dataclass(frozen=True)
class PipelineSpec:
    """A DAG of operator nodes, topologically ordered; ``output`` is the terminal node id."""

    name: str
    dataset: str  # the dataset this pipeline writes
    inputs: tuple[str, ...]  # input dataset names, in @inputs order
    nodes: tuple[Node, ...]
    output: str
    env: tuple[str, ...] = ()
    code: UserCode | None = None  # the pipeline function itself, for display and diffs


# --------------------------------------------------------------------------- sources

CdcMode = Literal["append", "upsert", "debezium", "native"]


@dataclass(frozen=True)
class ConnectorSpec:
    """``kind`` is ``kafka``/``s3``/``postgres``/``webhook``; ``config`` holds its settings
    (topic, bucket + prefix/path + format, table + cursor, endpoint, ...) as sorted pairs.
    Secrets are referenced by name, never inlined."""

    kind: Literal[
        "kafka",
        "s3",
        "postgres",
        "webhook",
        "mysql",
        "snowflake",
        "bigquery",
        "redshift",
        "kinesis",
        "http",
        "mongo",
        "pubsub",
    ]
    name: str  # the connection's name, e.g. Kafka(name="events_kafka")
    config: tuple[tuple[str, None | bool | int | float | str], ...]


OMITTED_WHEN_DEFAULT = {"wire": "omitted when default"}
"""Field metadata: a field added after blueprints were hashed is left out of the encoding
while it holds its default, so adding it changes no existing physical name."""


@dataclass(frozen=True)
class SampleSpec:
    rate: float
    using: tuple[str, ...] = ()  # () = every column


@dataclass(frozen=True)
class SourceSpec:
    connector: ConnectorSpec
    cdc: CdcMode = "append"
    disorder: int = 14 * 24 * 3600
    every: int | None = None
    since: str | None = None  # ISO-8601 instant
    until: str | None = None
    env: tuple[str, ...] = ()
    preproc: tuple[
        tuple[str, Expr | Lit | UserCode], ...
    ] = ()  # field -> expression / literal / code
    where: Expr | UserCode | None = None
    bounded: bool = False
    idleness: int | None = None
    # event-time bounds: rows stamped before ``earliest`` or more than ``max_future`` seconds
    # after their arrival are error rows, so one bad clock cannot move the watermark
    earliest: str = "1970-01-01T00:00:00+00:00"
    max_future: int = 24 * 3600
    # Fennel's ``sample=``: keep this fraction of rows, chosen by a hash of ``using`` columns
    sample: SampleSpec | None = field(default=None, metadata=OMITTED_WHEN_DEFAULT)


@dataclass(frozen=True)
class SinkSpec:
    """``@sink(conn, ...)``: a dataset's changes written out to a connector (Fennel's)."""

    connector: ConnectorSpec
    cdc: str | None = None
    every: int | None = None
    how: str | None = None
    renames: tuple[tuple[str, str], ...] = ()
    since: str | None = None
    until: str | None = None
    env: tuple[str, ...] = ()


# --------------------------------------------------------------------------- expectations


@dataclass(frozen=True)
class ExpectationSpec:
    """One great-expectations expectation: its type and kwargs (sorted pairs)."""

    type: str
    kwargs: tuple[tuple[str, None | bool | int | float | str | tuple[object, ...]], ...]


@dataclass(frozen=True)
class ExpectationsSpec:
    version: int
    expectations: tuple[ExpectationSpec, ...]


# --------------------------------------------------------------------------- datasets


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    version: int
    fields: tuple[FieldSpec, ...]
    meta: MetaSpec = field(default_factory=MetaSpec)
    index: bool = False
    online: bool = True
    offline: bool = True
    history: int = 2 * 365 * 24 * 3600
    sources: tuple[SourceSpec, ...] = ()
    pipelines: tuple[PipelineSpec, ...] = ()
    expectations: ExpectationsSpec | None = None
    terminal: bool = False  # produced by a continuous-window aggregate (cannot feed pipelines)
    sinks: tuple[SinkSpec, ...] = field(default=(), metadata=OMITTED_WHEN_DEFAULT)
    # key fields marked ``field(key=True, erase_key=True)``: what ``erase`` requests name
    erase_keys: tuple[str, ...] = field(default=(), metadata=OMITTED_WHEN_DEFAULT)

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields if f.key)

    @property
    def timestamp(self) -> str:
        return next(f.name for f in self.fields if f.timestamp)

    @property
    def _name(self) -> str:
        """Fennel's name attribute of a dataset (``client.get_datasets()[0]._name``)."""
        return self.name


# --------------------------------------------------------------------------- featuresets


@dataclass(frozen=True)
class FeatureSpec:
    name: str
    dtype: DType
    version: int = 0
    default: None | bool | int | float | str = None
    description: str = ""
    meta: MetaSpec = field(default_factory=MetaSpec)


# list_lookup: a lookup keyed by list features, one key per element (Fennel's list lookup)
ExtractorKind = Literal["python", "lookup", "list_lookup", "alias", "expr"]


@dataclass(frozen=True)
class ExtractorSpec:
    """``python``: user code run on input batches; ``lookup``: ``dataset.field`` by the
    dataset's keys (``lookup_dataset``/``lookup_field``); ``alias``: one feature copied from
    another; ``expr``: an expression over the featureset's input features."""

    name: str
    featureset: str
    kind: ExtractorKind
    inputs: tuple[str, ...]  # fully qualified "Featureset.feature"
    outputs: tuple[str, ...]  # feature names of this featureset
    version: int = 0
    deps: tuple[str, ...] = ()  # dataset names this extractor may look up
    code: UserCode | None = None
    expr: Expr | None = None
    lookup_dataset: str | None = None
    lookup_field: str | None = None
    default: None | bool | int | float | str = None
    env: tuple[str, ...] = ()
    meta: MetaSpec = field(default_factory=MetaSpec)


@dataclass(frozen=True)
class FeaturesetSpec:
    name: str
    features: tuple[FeatureSpec, ...]
    extractors: tuple[ExtractorSpec, ...]
    meta: MetaSpec = field(default_factory=MetaSpec)
    # its other methods (``@classmethod def common_names(cls)``), which extractors call on
    # ``cls``; left out of the encoding while none
    helpers: tuple[HelperSpec, ...] = field(default=(), metadata=OMITTED_WHEN_DEFAULT)

    @property
    def _name(self) -> str:
        """Fennel's name attribute of a featureset (``client.get_featuresets()[0]._name``)."""
        return self.name


@dataclass(frozen=True)
class HelperSpec:
    """A featureset's own method, shipped with it: ``cls.<name>(...)`` in its extractors."""

    name: str
    kind: Literal["classmethod", "staticmethod"]
    code: UserCode


# --------------------------------------------------------------------------- commit


@dataclass(frozen=True)
class CommitSpec:
    """What a client sends: every entity of the commit, sorted by name."""

    message: str
    datasets: tuple[DatasetSpec, ...]
    featuresets: tuple[FeaturesetSpec, ...]
    env: str | None = None
    incremental: bool = False
    wire_version: int = WIRE_VERSION
