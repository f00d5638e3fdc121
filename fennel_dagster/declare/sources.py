"""Connectors and ``@source``: where a dataset's rows come from, as in Fennel.

Credentials never enter the IR: configuration keys that hold secrets are dropped and the
connection is known by its ``name``, which the deployment maps to real credentials.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Callable
from typing import Any, TypeVar

from fennel_dagster.declare.errors import DeclarationError
from fennel_dagster.declare.expr import Expr, col
from fennel_dagster.declare.window import duration
from fennel_dagster.integrations.aws import Secret
from fennel_dagster.wire import spec
from fennel_dagster.wire.usercode import capture

T = TypeVar("T")
_SECRET_WORDS = ("password", "secret", "access_key", "key_id", "token", "sasl", "service_account")
_CDC = ("append", "upsert", "debezium", "native")


def _pairs(config: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(
        sorted(
            (k, v)
            for k, v in config.items()
            if v is not None
            and not isinstance(v, Secret | Certificate)
            and not any(w in k.lower() for w in _SECRET_WORDS)
        )
    )


class Connector:
    """A reference to data inside a connection (a topic, a table, a path, an endpoint)."""

    def __init__(self, kind: str, name: str, config: dict[str, Any]) -> None:
        self.kind, self.name, self.config = kind, name, config

    def to_ir(self) -> spec.ConnectorSpec:
        return spec.ConnectorSpec(kind=self.kind, name=self.name, config=_pairs(self.config))  # type: ignore[arg-type]


class _Connection:
    name: str

    @classmethod
    def get(cls, name: str) -> Any:
        """Fennel's reference to a connection configured outside the code, by name alone:
        the deployment maps the name to its settings and credentials."""
        return cls(name=name)  # type: ignore[call-arg]


class Kafka(_Connection):
    def __init__(self, name: str, bootstrap_servers: str = "", **options: Any) -> None:
        self.name, self.bootstrap_servers, self.options = name, bootstrap_servers, options

    def topic(self, topic: str, format: str | Avro | Protobuf = "json") -> Connector:  # noqa: A002
        fmt = format.to_config() if isinstance(format, Avro | Protobuf) else {"format": format}
        cfg = {"topic": topic, **fmt, "bootstrap_servers": self.bootstrap_servers or None}
        return Connector("kafka", self.name, {**self.options, **cfg})


class Avro:
    """Fennel's Avro format for a Kafka topic, with its schema registry (credentials stay
    out of the IR, as for every connection)."""

    def __init__(self, registry: str, url: str, **credentials: Any) -> None:
        self.registry, self.url = registry, url

    def to_config(self) -> dict[str, Any]:
        return {"format": "avro", "schema_registry": self.registry, "registry_url": self.url}


class Protobuf:
    """Fennel's Protobuf format for a Kafka topic, with its schema registry: authenticated by
    ``username`` and ``password`` or by ``token`` (a str or a ``Secret``), never both. The
    credentials stay out of the IR; the engine reads JSON topics only, so a commit that reads
    a Protobuf topic is refused (``commit.executable``)."""

    def __init__(
        self,
        registry: str,
        url: str,
        username: str | Secret | None = None,
        password: str | Secret | None = None,
        token: str | Secret | None = None,
    ) -> None:
        where = f"Protobuf(registry={registry!r}, url={url!r})"
        if username or password:
            if token is not None:
                raise DeclarationError(
                    f"{where}: give username= and password=, or token=, not both"
                )
            if not username or not password:
                raise DeclarationError(f"{where}: give both username= and password=")
        elif token is None:
            raise DeclarationError(f"{where}: give username= and password=, or token=")
        self.registry, self.url = registry, url

    def to_config(self) -> dict[str, Any]:
        return {"format": "protobuf", "schema_registry": self.registry, "registry_url": self.url}


class S3(_Connection):
    def __init__(self, name: str, **options: Any) -> None:
        self.name, self.options = name, options

    def bucket(
        self,
        bucket_name: str,
        prefix: str | None = None,
        path: str | None = None,
        format: str = "csv",  # noqa: A002
        delimiter: str | None = None,
        spread: str | None = None,
    ) -> Connector:
        """``spread`` (Fennel's, with a dated ``path``): how far a file's rows may lie from
        its path's date. Recorded; the poller reads every matching file, so it needs none."""
        if (prefix is None) == (path is None):
            raise DeclarationError(
                f"S3 {self.name}.bucket({bucket_name!r}): give exactly one of prefix= or path="
            )
        cfg = {"bucket": bucket_name, "prefix": prefix, "path": path, "format": format,
               "delimiter": delimiter,
               "spread": duration(spread, f"S3 {self.name} spread") if spread else None}  # fmt: skip
        return Connector("s3", self.name, {**self.options, **cfg})


class Postgres(_Connection):
    def __init__(
        self, name: str, host: str = "", db_name: str = "", port: int = 5432, **options: Any
    ) -> None:
        self.name = name
        self.options = {"host": host or None, "db_name": db_name or None, "port": port, **options}

    def table(self, table_name: str, cursor: str) -> Connector:
        return Connector(
            "postgres", self.name, {**self.options, "table": table_name, "cursor": cursor}
        )


class _External(_Connection):
    """A connection this platform declares exactly as Fennel does but has no reader for: a
    commit that reads one is refused, naming it (``commit.executable``)."""

    kind = ""

    def __init__(self, name: str, **options: Any) -> None:
        self.name, self.options = name, options


class _Tables(_External):
    def table(self, table_name: str, cursor: str | None = None) -> Connector:
        return Connector(self.kind, self.name, {**self.options, "table": table_name,
                                                "cursor": cursor})  # fmt: skip


class MySQL(_Tables):
    kind = "mysql"


class Snowflake(_Tables):
    kind = "snowflake"


class BigQuery(_Tables):
    kind = "bigquery"


class Redshift(_Tables):
    kind = "redshift"


class Mongo(_External):
    """A MongoDB database (Fennel's ``Mongo(name, host, db_name, username, password)``); rows
    come from a collection, read incrementally by a ``cursor`` field."""

    kind = "mongo"

    def collection(self, collection_name: str, cursor: str) -> Connector:
        return Connector(self.kind, self.name, {**self.options, "collection": collection_name,
                                                "cursor": cursor})  # fmt: skip


class PubSub(_External):
    """A Google Pub/Sub project (Fennel's ``PubSub(name, project_id, service_account_key)``;
    the key is a credential and stays out of the IR)."""

    kind = "pubsub"

    def topic(self, topic_id: str, format: str) -> Connector:  # noqa: A002
        if format != "json":
            raise DeclarationError(
                f"PubSub {self.name}.topic({topic_id!r}, format={format!r}): "
                "Pub/Sub topics are read as JSON; use format='json'"
            )
        return Connector(self.kind, self.name, {**self.options, "topic_id": topic_id,
                                                "format": format})  # fmt: skip


class Kinesis(_External):
    kind = "kinesis"

    def stream(
        self,
        stream_arn: str,
        init_position: str | dt.datetime = "latest",
        format: str = "json",  # noqa: A002
    ) -> Connector:
        position = (
            init_position.isoformat() if isinstance(init_position, dt.datetime) else init_position
        )
        return Connector(self.kind, self.name, {**self.options, "stream_arn": stream_arn,
                                                "init_position": position, "format": format})  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Certificate:
    """Fennel's CA certificate for an HTTP sink, ``HTTP(..., ca_cert=Certificate(...))``: the
    PEM text or a ``Secret`` holding it (kept out of the IR, as credentials are)."""

    cert: str | Secret


class HTTP(_External):
    """An HTTP endpoint to sink to (Fennel's ``HTTP(name, host, healthz, ca_cert)``).

    ``host`` and the certificate may be ``Secret``s, as in Fennel; neither their values nor
    their references enter the IR, only that they are secrets (so the platform, which
    resolves none, can refuse the commit saying which). A certificate given as PEM text is
    public and kept: it verifies the endpoint's TLS."""

    kind = "http"

    def __init__(
        self,
        name: str,
        host: str | Secret = "",
        healthz: str = "",
        ca_cert: Certificate | None = None,
        **options: Any,
    ) -> None:
        cfg: dict[str, Any] = {"healthz": healthz or None}
        if isinstance(host, Secret):
            cfg["host_ref"] = "Secret"
        else:
            cfg["host"] = host or None
        cert = ca_cert.cert if isinstance(ca_cert, Certificate) else None
        if isinstance(cert, Secret):
            cfg["ca_cert_ref"] = "Secret"
        elif cert:
            cfg["ca_cert_pem"] = cert
        super().__init__(name, **options, **cfg)

    def path(
        self, endpoint: str, limit: int | None = None, headers: dict[str, str] | None = None
    ) -> Connector:
        if limit is not None and (not isinstance(limit, int) or limit < 1):
            raise DeclarationError(
                f"HTTP {self.name}.path({endpoint!r}, limit={limit!r}): limit is the number of "
                "changes per request, a positive int (default 100)"
            )
        cfg = {"endpoint": endpoint, "limit": limit,
               "headers": json.dumps(headers, sort_keys=True) if headers else None}  # fmt: skip
        return Connector(self.kind, self.name, {**self.options, **cfg})


class Webhook(_Connection):
    def __init__(self, name: str, retention: str = "7d") -> None:
        self.name, self.retention = name, duration(retention, f"Webhook {name} retention")

    def endpoint(self, endpoint: str) -> Connector:
        return Connector("webhook", self.name, {"endpoint": endpoint, "retention": self.retention})


def _instant(value: dt.datetime | str | None, where: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value)
        except ValueError as e:
            raise DeclarationError(f"{where}: {value!r} is not an ISO-8601 instant") from e
    return (value if value.tzinfo else value.replace(tzinfo=dt.UTC)).isoformat()


def source(
    conn: Connector,
    disorder: str | int = "14d",
    cdc: str = "append",
    every: str | None = None,
    since: dt.datetime | str | None = None,
    until: dt.datetime | str | None = None,
    env: str | list[str] | None = None,
    preproc: dict[str, Any] | None = None,
    where: Expr | Callable[..., Any] | None = None,
    bounded: bool = False,
    idleness: str | None = None,
    earliest: dt.datetime | str = "1970-01-01T00:00:00+00:00",
    max_future: str | int = "1d",
    sample: float | Sample | None = None,
) -> Callable[[T], T]:
    """Attach a source to a dataset (placed above ``@dataset``, as in Fennel).

    ``earliest`` and ``max_future`` bound event time (beyond Fennel's API): a row stamped
    before ``earliest``, or more than ``max_future`` after it arrives, is an error row
    instead of a watermark that jumps decades ahead."""
    if not isinstance(conn, Connector):
        raise DeclarationError(
            f"@source needs a connector reference such as Kafka(...).topic('t'), got {conn!r}"
        )
    if cdc not in _CDC:
        raise DeclarationError(f"@source(cdc={cdc!r}): use one of {', '.join(_CDC)}")
    if bounded and not idleness:
        raise DeclarationError(
            "@source(bounded=True) needs idleness=: how long without new data before the "
            "source is taken as exhausted, e.g. idleness='1h'"
        )
    if idleness and not bounded:
        raise DeclarationError(
            f"@source(idleness={idleness!r}) is only read with bounded=True: add "
            "bounded=True, or remove idleness="
        )

    def attach(cls: T) -> T:
        name = getattr(cls, "__name__", "?")
        where_ir: spec.Expr | spec.UserCode | None
        found = where.what if isinstance(where, Eval) else where
        if found is None:
            where_ir = None
        elif isinstance(found, Expr):
            where_ir = found.to_ir()
        else:
            where_ir = capture(found)
        pre: list[tuple[str, Any]] = []
        for field_name, value in sorted((preproc or {}).items()):
            pre.append((field_name, _preproc_ir(value, f"{name} @source preproc {field_name!r}")))
        src = spec.SourceSpec(
            connector=conn.to_ir(),
            cdc=cdc,  # type: ignore[arg-type]
            disorder=duration(disorder, f"{name} @source disorder"),
            every=duration(every, f"{name} @source every") if every else None,
            since=_instant(since, f"{name} @source since"),
            until=_instant(until, f"{name} @source until"),
            env=tuple(sorted([env] if isinstance(env, str) else (env or []))),
            preproc=tuple(pre),
            where=where_ir,
            bounded=bounded,
            idleness=duration(idleness, f"{name} @source idleness") if idleness else None,
            earliest=_instant(earliest, f"{name} @source earliest") or spec.SourceSpec.earliest,
            max_future=duration(max_future, f"{name} @source max_future"),
            sample=_sample(sample, f"{name} @source sample"),
        )
        existing = list(getattr(cls, "__fennel_sources__", ()))
        cls.__fennel_sources__ = (*existing, src)  # type: ignore[attr-defined]
        return cls

    return attach


class Eval:
    """Fennel's ``eval(expr_or_function, schema=...)`` in ``preproc``/``where``: an expression,
    or a function of the raw rows (a DataFrame) returning a column."""

    def __init__(self, what: Any, schema: dict[str, Any] | None = None) -> None:
        if not isinstance(what, Expr) and not callable(what):
            raise DeclarationError(f"eval() takes an expression or a function, got {what!r}")
        self.what, self.schema = what, dict(schema or {})


def eval(what: Any, schema: dict[str, Any] | None = None) -> Eval:  # noqa: A001 - Fennel's name
    return Eval(what, schema)


def ref(column: str) -> Expr:
    """Fennel's ``ref("user_id")`` in ``preproc``: the value of another raw column."""
    return col(column)


class Sample:
    """Fennel's ``Sample(rate, using=[...])``: keep ``rate`` of the rows, chosen by a hash of
    the ``using`` columns (every column when empty), so a row is kept or not everywhere."""

    def __init__(self, rate: float, using: list[str] | None = None) -> None:
        self.rate, self.using = rate, tuple(using or ())


def _sample(value: float | Sample | None, where: str) -> spec.SampleSpec | None:
    if value is None:
        return None
    s = value if isinstance(value, Sample) else Sample(float(value))
    if not 0.0 <= s.rate <= 1.0:
        raise DeclarationError(f"{where}: the rate must be within [0, 1], got {s.rate}")
    return spec.SampleSpec(float(s.rate), s.using)


def _preproc_ir(value: Any, where: str) -> spec.Expr | spec.Lit | spec.UserCode:
    if isinstance(value, Eval):
        value = value.what
    if isinstance(value, Expr):
        return value.to_ir()
    if callable(value):
        return capture(value)
    try:
        return spec.Lit(value)
    except TypeError as e:
        raise DeclarationError(
            f"{where}: {value!r} is not a literal, an expression or eval()"
        ) from e


_SINK_KINDS = ("kafka", "s3", "snowflake", "http")


def sink(
    conn: Connector,
    cdc: str | None = None,
    every: str | None = None,
    how: str | None = None,
    renames: dict[str, str] | None = None,
    since: dt.datetime | str | None = None,
    until: dt.datetime | str | None = None,
    env: str | list[str] | None = None,
) -> Callable[[T], T]:
    """Write a dataset's changes out to a connector (Fennel's ``@sink``, with its rules: Kafka
    and HTTP take ``cdc="debezium"`` (Kafka: JSON), incrementally; S3 takes Delta,
    incrementally). The mock client, like Fennel's, writes nothing; the platform refuses a
    commit with a sink it cannot run (``commit.executable``) rather than dropping it."""
    if not isinstance(conn, Connector):
        raise DeclarationError(
            f"@sink needs a connector reference such as Kafka(...).topic('t'), got {conn!r}"
        )
    where = f"@sink({conn.kind}({conn.name}))"
    if conn.kind not in _SINK_KINDS:
        raise DeclarationError(
            f"{where}: sinks write to Kafka, S3, Snowflake or HTTP, not {conn.kind}"
        )
    fmt = conn.config.get("format")
    if conn.kind == "kafka":
        for bad, why in ((cdc != "debezium", f"takes cdc='debezium', not {cdc!r}"),
                         (fmt != "json", f"writes JSON, not {fmt!r}"),
                         (every is not None, "takes no every= (it is continuous)"),
                         (how not in (None, "incremental"), "is incremental only"),
                         (bool(renames), "takes no renames"),
                         (since is not None or until is not None, "takes no since/until")):  # fmt: skip
            if bad:
                raise DeclarationError(f"{where}: a Kafka sink {why}")
    elif conn.kind == "http":
        for bad, why in ((cdc != "debezium", f"takes cdc='debezium', not {cdc!r}"),
                         (every is not None, "takes no every= (it is continuous)"),
                         (how not in (None, "incremental"), "is incremental only"),
                         (bool(renames), "takes no renames"),
                         (since is not None or until is not None, "takes no since/until")):  # fmt: skip
            if bad:
                raise DeclarationError(f"{where}: an HTTP sink {why}")
    elif conn.kind == "s3":
        for bad, why in ((cdc is not None, "takes no cdc"),
                         (fmt != "delta", f"writes Delta (format='delta'), not {fmt!r}"),
                         (how != "incremental", "needs how='incremental'")):  # fmt: skip
            if bad:
                raise DeclarationError(f"{where}: an S3 sink {why}")

    def attach(cls: T) -> T:
        name = getattr(cls, "__name__", "?")
        out = spec.SinkSpec(
            connector=conn.to_ir(),
            cdc=cdc,
            every=duration(every, f"{name} @sink every") if every else None,
            how=how,
            renames=tuple(sorted((renames or {}).items())),
            since=_instant(since, f"{name} @sink since"),
            until=_instant(until, f"{name} @sink until"),
            env=tuple(sorted([env] if isinstance(env, str) else (env or []))),
        )
        existing = list(getattr(cls, "__fennel_sinks__", ()))
        cls.__fennel_sinks__ = (*existing, out)  # type: ignore[attr-defined]
        return cls

    return attach
