"""Fennel's API reference, parameter by parameter: what carries each documented parameter here.

``DOCUMENTED`` maps each page of Fennel's ``docs/pages/api-reference`` (its path below that
folder) to its documented parameters, each to one of:

- ``Carried``: the IR fields (keys of ``wire.conformance_table.TABLE``) that carry it to the
  executors; the conformance table says who honours them, or that the commit refuses them;
- ``Declined``: refused where it is declared (``at``: the ``fennel_dagster/declare`` function
  that raises a ``DeclarationError`` naming the parameter);
- ``Handled``: a parameter of a client method or of the REST server, taken by the functions
  ``at`` (mock, local and HTTP clients, or the server); ``missing`` names the clients that
  lack the method or the parameter.

Pages with no parameters are listed with none, so that every page is accounted for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias


@dataclass(frozen=True)
class Carried:
    fields: tuple[str, ...]


@dataclass(frozen=True)
class Declined:
    at: str


@dataclass(frozen=True)
class Handled:
    at: tuple[str, ...]
    missing: str = ""


Mapping: TypeAlias = Carried | Declined | Handled

_M = "fennel_dagster/mock/client.py::MockClient"
_L = "fennel_dagster/client/local.py::LocalClient"
_H = "fennel_dagster/client/http.py::Client"
_REST = "fennel_dagster/serve/rest.py"
_AUTH = "fennel_dagster/serve/auth.py"


def _c(*fields: str) -> Carried:
    return Carried(fields)


def _clients(
    method: str, missing: str = "", *, mock: bool = True, local: bool = True, http: bool = True
) -> Handled:
    at = tuple(f"{c}.{method}" for c, on in ((_M, mock), (_L, local), (_H, http)) if on)
    return Handled(at, missing)


_ARGS = _c("Call.args")  # an expression's parameter: a literal (or expression) argument
_CONFIG = _c("ConnectorSpec.config")
_CONN = _c("ConnectorSpec.name")


def _agg(*names: str) -> dict[str, Mapping]:
    table: dict[str, Mapping] = {
        "of": _c("AggSpec.of"),
        "window": _c("AggSpec.window"),
        "into_field": _c("AggSpec.into"),
        "default": _c("AggSpec.default"),
        "unique": _c("AggSpec.unique"),
        "approx": _c("AggSpec.approx"),
        "half_life": _c("AggSpec.half_life"),
        "limit": _c("AggSpec.limit"),
        "dedup": _c("AggSpec.dedup"),
        "dropnull": _c("AggSpec.dropnull"),
        "p": _c("AggSpec.p"),
        "unordered": Declined("fennel_dagster/declare/aggregate.py::Distinct.__init__"),
    }
    return {n: table[n] for n in names}


def _conn(*names: str) -> dict[str, Mapping]:
    return {n: _CONN if n == "name" else _CONFIG for n in names}


_TZ: dict[str, Mapping] = {"timezone": _ARGS}
_NONE: dict[str, Mapping] = {}

DOCUMENTED: dict[str, dict[str, Mapping]] = {
    "aggregations/average.md": _agg("of", "window", "into_field", "default"),
    "aggregations/count.md": _agg("window", "into_field", "unique", "approx", "of"),
    "aggregations/distinct.md": _agg("of", "window", "into_field", "unordered"),
    "aggregations/exponential-decay-sum.md": _agg("of", "window", "half_life", "into_field"),
    "aggregations/firstk.md": _agg("of", "window", "into_field", "limit", "dedup", "dropnull"),
    "aggregations/lastk.md": _agg("of", "window", "into_field", "limit", "dedup", "dropnull"),
    "aggregations/max.md": _agg("of", "window", "into_field", "default"),
    "aggregations/min.md": _agg("of", "window", "into_field", "default"),
    "aggregations/quantile.md": _agg("of", "window", "into_field", "default", "p", "approx"),
    "aggregations/stddev.md": _agg("of", "window", "into_field", "default"),
    "aggregations/sum.md": _agg("of", "window", "into_field"),
    "client/branch.md": _NONE,
    "client/cancel-offline-query.md": {"request_id": _clients("cancel_offline_query")},
    "client/checkout.md": {
        "name": _clients("checkout"),
        "init": _clients("checkout"),
    },
    "client/clone-branch.md": {
        "name": _clients("clone_branch"),
        "from_name": _clients("clone_branch"),
    },
    "client/commit.md": {
        "message": _c("CommitSpec.message"),
        "datasets": _c("CommitSpec.datasets"),
        "featuresets": _c("CommitSpec.featuresets"),
        "preview": _clients("commit"),
        "incremental": _c("CommitSpec.incremental"),
        "env": _c("CommitSpec.env"),
        "backfill": _clients("commit"),
    },
    "client/delete-branch.md": {"name": _clients("delete_branch")},
    "client/erase.md": {
        "dataset": _clients("erase", "the platform has no erase", local=False, http=False),
        "erase_keys": _c("DatasetSpec.erase_keys"),
    },
    "client/init-branch.md": {"name": _clients("init_branch")},
    "client/log.md": {
        "webhook": _clients("log"),
        "endpoint": _clients("log"),
        "df": _clients("log"),
        "batch_size": _clients("log"),
    },
    "client/lookup.md": {
        "dataset": _clients("lookup"),
        "keys": _clients("lookup"),
        "fields": _clients("lookup"),
        "timestamps": _clients("lookup"),
    },
    "client/query-offline.md": {
        "inputs": _clients("query_offline"),
        "outputs": _clients("query_offline"),
        "input_dataframe": _clients("query_offline"),
        "input_s3": _clients("query_offline"),
        "timestamp_column": _clients("query_offline"),
        "output_s3": _clients("query_offline"),
        "workflow": _clients("query_offline"),
        "feature_to_column_map": _clients("query_offline"),
    },
    "client/query.md": {
        "inputs": _clients("query"),
        "outputs": _clients("query"),
        "input_dataframe": _clients("query"),
        "log": _clients("query"),
        "workflow": _clients("query"),
        "sampling_rate": _clients("query"),
    },
    "client/track-offline-query.md": {"request_id": _clients("track_offline_query")},
    "client/xray.md": {
        n: Handled((), "no client has xray") for n in ("datasets", "featuresets", "properties")
    },
    "data-types/core-types.md": _NONE,
    "data-types/duration.md": _NONE,
    "data-types/type-restrictions.md": {
        "regex": _c("RegexType.pattern"),
        "between": _c(
            "BetweenType.min", "BetweenType.max", "BetweenType.strict_min", "BetweenType.strict_max"
        ),
        "oneof": _c("OneOfType.options"),
    },
    "decorators/dataset.md": _NONE,
    "decorators/extractor.md": _NONE,
    "decorators/featureset.md": _NONE,
    "decorators/indexed.md": _NONE,
    "decorators/inputs.md": _NONE,
    "decorators/meta.md": _NONE,
    "decorators/outputs.md": _NONE,
    "decorators/pipeline.md": _NONE,
    "decorators/sink.md": {
        n: _c(f"SinkSpec.{n}") for n in ("every", "since", "until", "cdc", "env", "how", "renames")
    },
    "decorators/source.md": {
        n: _c(f"SourceSpec.{n}")
        for n in (
            "every",
            "since",
            "until",
            "disorder",
            "sample",
            "cdc",
            "env",
            "preproc",
            "where",
            "bounded",
            "idleness",
        )
    },
    "expectations.md": _NONE,
    "expressions/binary.md": _NONE,
    "expressions/col.md": {"name": _c("Col.name")},
    "expressions/datetime.md": {
        n: _ARGS
        for n in (
            "year",
            "month",
            "day",
            "hour",
            "minute",
            "second",
            "millisecond",
            "microsecond",
            "timezone",
        )
    },
    "expressions/dt/day.md": _TZ,
    "expressions/dt/hour.md": _TZ,
    "expressions/dt/minute.md": _TZ,
    "expressions/dt/month.md": _TZ,
    "expressions/dt/second.md": _TZ,
    "expressions/dt/since.md": {"other": _ARGS, "unit": _ARGS},
    "expressions/dt/since_epoch.md": {"unit": _ARGS},
    "expressions/dt/strftime.md": {"format": _ARGS, "timezone": _ARGS},
    "expressions/dt/year.md": _TZ,
    "expressions/eval.md": {
        "input_df": Handled(("fennel_dagster/declare/expr.py::Expr.eval",)),
        "schema": Handled(("fennel_dagster/declare/expr.py::Expr.eval",)),
    },
    "expressions/fillnull.md": {"expr": _ARGS, "fill": _ARGS},
    "expressions/from_epoch.md": {"duration": _ARGS, "unit": _ARGS},
    "expressions/isnull.md": {"expression": _ARGS},
    "expressions/list/all.md": _NONE,
    "expressions/list/any.md": _NONE,
    "expressions/list/at.md": {"index": _ARGS},
    "expressions/list/contains.md": {"item": _ARGS},
    "expressions/list/filter.md": {"var": _c("Var.name"), "predicate": _ARGS},
    "expressions/list/hasnull.md": _NONE,
    "expressions/list/len.md": _NONE,
    "expressions/list/map.md": {"var": _c("Var.name"), "expr": _ARGS},
    "expressions/list/max.md": _NONE,
    "expressions/list/mean.md": _NONE,
    "expressions/list/min.md": _NONE,
    "expressions/list/sum.md": _NONE,
    "expressions/lit.md": {"const": _c("Lit.value", "Lit.dtype")},
    "expressions/not.md": _NONE,
    "expressions/now.md": _NONE,
    **{
        f"expressions/num/{n}.md": _NONE
        for n in (
            "abs",
            "arccos",
            "arcsin",
            "arctan",
            "ceil",
            "cos",
            "floor",
            "sin",
            "sqrt",
            "tan",
            "to_string",
        )
    },
    "expressions/num/log.md": {"base": _ARGS},
    "expressions/num/pow.md": {"exponent": _ARGS},
    "expressions/num/round.md": {"precision": _ARGS},
    "expressions/repeat.md": {"value": _ARGS, "by": _ARGS},
    "expressions/str/concat.md": {"item": _ARGS},
    "expressions/str/contains.md": {"item": _ARGS},
    "expressions/str/endswith.md": {"item": _ARGS},
    "expressions/str/json_extract.md": {"path": _ARGS},
    "expressions/str/len.md": _NONE,
    "expressions/str/lower.md": _NONE,
    "expressions/str/parse.md": {"dtype": _c("Call.dtype")},
    "expressions/str/split.md": {"sep": _ARGS},
    "expressions/str/startswith.md": {"item": _ARGS},
    "expressions/str/strptime.md": {"format": _ARGS, "timezone": _ARGS},
    "expressions/str/upper.md": _NONE,
    "expressions/struct/get.md": {"field": _ARGS},
    "expressions/typeof.md": {"schema": Handled(("fennel_dagster/declare/expr.py::Expr.typeof",))},
    "expressions/when.md": {
        "when": _c("When.cases"),
        "then": _c("When.cases"),
        "otherwise": _c("When.otherwise"),
    },
    "expressions/zip.md": {"struct": _c("Call.dtype"), "kwargs": _ARGS},
    "operators/aggregate.md": {
        "aggregates": _c("AggregateNode.aggs"),
        "along": _c("AggregateNode.along"),
    },
    "operators/assign.md": {
        "name": _c("AssignColumn.name"),
        "dtype": _c("AssignColumn.dtype"),
        "func": _c("AssignColumn.code"),
        "**kwargs": _c("AssignColumn.expr"),
    },
    "operators/changelog.md": {
        "delete": _c("ChangelogNode.delete_column"),
        "insert": _c("ChangelogNode.delete_column"),
    },
    "operators/dedup.md": {"by": _c("DedupNode.by"), "window": _c("DedupNode.window")},
    "operators/drop.md": {"columns": _c("DropNode.columns")},
    "operators/dropnull.md": {"columns": _c("DropNullNode.columns")},
    "operators/explode.md": {"columns": _c("ExplodeNode.columns")},
    "operators/filter.md": {"func": _c("FilterNode.predicate", "FilterNode.code")},
    "operators/first.md": _NONE,
    "operators/groupby.md": {
        "keys": _c("AggregateNode.keys", "FirstNode.keys", "LatestNode.keys"),
        "window": _c("AggregateNode.window"),
    },
    "operators/join.md": {
        "dataset": _c("JoinNode.right"),
        "how": _c("JoinNode.how"),
        "on": _c("JoinNode.left_on", "JoinNode.right_on"),
        "left_on": _c("JoinNode.left_on"),
        "right_on": _c("JoinNode.right_on"),
        "within": _c("JoinNode.within_before", "JoinNode.within_after"),
        "fields": _c("JoinNode.fields"),
    },
    "operators/latest.md": _NONE,
    "operators/rename.md": {"columns": _c("RenameNode.mapping")},
    "operators/select.md": {"columns": _c("SelectNode.columns")},
    "operators/transform.md": {
        "func": _c("TransformNode.code"),
        "schema": _c("TransformNode.schema"),
    },
    "operators/union.md": _NONE,
    "rest-api/lineage.md": {
        "Content-Type": Handled((), "the server has no lineage endpoint"),
        "Authorization": Handled((), "the server has no lineage endpoint"),
        "X-FENNEL-BRANCH": Handled((), "the server has no lineage endpoint"),
    },
    "rest-api/log.md": {
        "Content-Type": Handled((), "the server reads every body as JSON, whatever its type"),
        "Authorization": Handled((_AUTH,)),
        "webhook": Handled((_REST,)),
        "endpoint": Handled((_REST,)),
        "data": Handled((_REST,)),
    },
    "rest-api/query.md": {
        "Content-Type": Handled((), "the server reads every body as JSON, whatever its type"),
        "Authorization": Handled((_AUTH,)),
        "X-FENNEL-BRANCH": Handled((_REST,)),
        "inputs": Handled((_REST,)),
        "outputs": Handled((_REST,)),
        "data": Handled((_REST,)),
        "log": Handled((_REST,)),
        "workflow": Handled((_REST,)),
        "sampling_rate": Handled((_REST,)),
    },
    "sink_connectors/certificate.md": {"cert": _CONFIG},
    "sink_connectors/http.md": _conn(
        "name", "host", "healthz", "ca_cert", "endpoint", "limit", "headers"
    ),
    "sink_connectors/kafka.md": _conn(
        "name",
        "bootstrap_servers",
        "security_protocol",
        "sasl_mechanism",
        "sasl_plain_username",
        "sasl_plain_password",
        "topic",
    ),
    "sink_connectors/s3.md": _conn(
        "name",
        "aws_access_key_id",
        "aws_secret_access_key",
        "role_arn",
        "bucket",
        "prefix",
        "format",
        "delimiter",
    ),
    "sink_connectors/snowflake.md": _conn(
        "name",
        "account",
        "role",
        "warehouse",
        "db_name",
        "schema",
        "username",
        "password",
        "table",
    ),
    "source_connectors/avro.md": _conn("registry", "url", "username", "password", "token"),
    "source_connectors/bigquery.md": _conn(
        "name", "project_id", "dataset_id", "service_account_key", "table", "cursor"
    ),
    "source_connectors/deltalake.md": _NONE,
    "source_connectors/hudi.md": _NONE,
    "source_connectors/kafka.md": _conn(
        "name",
        "bootstrap_servers",
        "security_protocol",
        "sasl_mechanism",
        "sasl_plain_username",
        "sasl_plain_password",
        "topic",
        "format",
    ),
    "source_connectors/kinesis.md": _conn(
        "name", "role_arn", "stream_arn", "init_position", "format"
    ),
    "source_connectors/mongo.md": _conn(
        "name", "host", "db_name", "username", "password", "table", "cursor"
    ),
    "source_connectors/mysql.md": _conn(
        "name",
        "host",
        "port",
        "db_name",
        "username",
        "password",
        "jdbc_params",
        "table",
        "cursor",
    ),
    "source_connectors/postgres.md": _conn(
        "name",
        "host",
        "port",
        "db_name",
        "username",
        "password",
        "jdbc_params",
        "table",
        "cursor",
    ),
    "source_connectors/protobuf.md": _conn("registry", "url", "username", "password", "token"),
    "source_connectors/pubsub.md": _conn(
        "name", "project_id", "service_account_key", "topic_id", "format"
    ),
    "source_connectors/redshift.md": _conn(
        "name",
        "s3_access_role_arn",
        "db_name",
        "username",
        "password",
        "host",
        "port",
        "schema",
        "table",
        "cursor",
    ),
    "source_connectors/s3.md": _conn(
        "name",
        "aws_access_key_id",
        "aws_secret_access_key",
        "role_arn",
        "bucket",
        "prefix",
        "path",
        "format",
        "delimiter",
        "spread",
    ),
    "source_connectors/secret.md": _conn("arn", "role_arn"),
    "source_connectors/snowflake.md": _conn(
        "name",
        "account",
        "role",
        "warehouse",
        "db_name",
        "schema",
        "username",
        "password",
        "table",
        "cursor",
    ),
    "source_connectors/webhook.md": _conn("name", "retention", "endpoint"),
}
