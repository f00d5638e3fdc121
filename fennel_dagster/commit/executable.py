"""Rules about what the executors can run: refused at commit, never found out by a runner.

- ``engine_shapes`` (definition server and mock alike): pipeline shapes the engine cannot
  cut into stages (``commit.stages``).
- ``engine_connectors`` (definition server only: the mock reads no connector, rows are
  logged to it directly): sources the streaming engine has no reader for.
- ``sinks`` (definition server only): sinks the platform cannot write: Snowflake, Kafka on
  another cluster than the platform's (a connection with no ``bootstrap_servers`` is the
  platform's, as it is for Kafka sources), S3 sinks it cannot write as a Delta table of its
  own in a bucket of the platform's object store (the offline writer's table, each commit
  recording the offsets it holds), and HTTP sinks whose host is a secret or whose health
  check fails (Fennel checks an HTTP sink's ``healthz`` at commit too).
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable
from urllib.parse import urlsplit

from fennel_dagster.commit.errors import Violation
from fennel_dagster.commit.graph import EntityGraph
from fennel_dagster.commit.stages import problems
from fennel_dagster.settings import get_settings
from fennel_dagster.wire.http_endpoint import HttpEndpoint
from fennel_dagster.wire.spec import SinkSpec

HEALTHZ_TIMEOUT_S = 5.0

ENGINE_CONNECTORS = ("kafka", "webhook", "s3", "postgres")


def engine_shapes(g: EntityGraph, prev: EntityGraph | None) -> Iterable[Violation]:
    for ds in g.datasets.values():
        for p in ds.pipelines:
            for problem in problems(p):
                yield Violation(f"{ds.name}.{p.name}", f"operator {problem.operator}",
                                      problem.message, problem.fix)  # fmt: skip


def engine_connectors(g: EntityGraph, prev: EntityGraph | None) -> Iterable[Violation]:
    for ds in g.datasets.values():
        for src in ds.sources:
            c = src.connector
            where = f"source {c.kind}({c.name})"
            if c.kind not in ENGINE_CONNECTORS:
                yield Violation(ds.name, where, (
                    f"the platform has no reader for {c.kind} sources yet (it reads Kafka "
                    "topics, webhook endpoints, S3 prefixes and Postgres tables)"),
                    "feed the rows through a Kafka topic or a Webhook endpoint (Client.log), "
                    "or select this source out with env=")  # fmt: skip
            elif c.kind == "kafka" and not dict(c.config).get("topic"):
                yield Violation(ds.name, where, "names no topic",
                                      f"use {c.name}.topic('<topic>') in @source")  # fmt: skip
            elif c.kind == "kafka" and (why := _unreadable_format(dict(c.config))):
                yield Violation(ds.name, where, why[0], why[1])
            elif c.kind == "postgres":
                cfg = dict(c.config)
                for key, fix in (("host", "host="), ("db_name", "db_name=")):
                    if not cfg.get(key):
                        yield Violation(ds.name, where, f"names no {key}",
                                        f"give Postgres(name={c.name!r}, {fix}...)")  # fmt: skip
                if not cfg.get("cursor"):
                    yield Violation(ds.name, where, "has no cursor column",
                                    f"use {c.name}.table('<table>', cursor='<column>')")  # fmt: skip


def _unreadable_format(cfg: dict[str, object]) -> tuple[str, str] | None:
    """Why the engine cannot read a Kafka source's values, and the fix (None: it can)."""
    fmt = cfg.get("format", "json")
    if fmt == "json":
        return None
    if fmt not in ("avro", "protobuf"):
        return (f"format {fmt!r} is not one the engine reads (JSON, Avro, Protobuf)",
                "produce JSON, or Avro / Protobuf through a schema registry")  # fmt: skip
    name = "Avro" if fmt == "avro" else "Protobuf"
    if cfg.get("schema_registry") != "confluent":
        return (f"{name} with registry {cfg.get('schema_registry')!r}: the engine reads "
                "values in Confluent's wire format, from a Confluent-compatible registry",
                f'give {name}(registry="confluent", url=...)')  # fmt: skip
    if not str(cfg.get("registry_url") or "").startswith(("http://", "https://")):
        return (f"{name} with registry url {cfg.get('registry_url')!r}: not an http(s) URL",
                f'give {name}(registry="confluent", url="http://<host>:<port>")')  # fmt: skip
    return None


def sinks(g: EntityGraph, prev: EntityGraph | None) -> Iterable[Violation]:
    """The platform writes Kafka sinks on its own cluster (in the runner's transaction: exactly
    once) and S3 sinks as Delta tables on its object store (the offline writer's commits record
    their offsets); a sink elsewhere, on another cluster or another kind of store, is
    refused."""
    tables: dict[tuple[str, str], str] = {}  # S3 sink location -> the dataset writing it
    for ds in g.datasets.values():
        for out in ds.sinks:
            c = out.connector
            where = f"sink {c.kind}({c.name})"
            if c.kind == "s3":
                yield from _s3_sink(ds.name, where, out, tables)
                continue
            if c.kind == "http":
                old = prev.datasets.get(ds.name) if prev is not None else None
                yield from _http_sink(ds.name, where, out, old is not None and out in old.sinks)
                continue
            if c.kind != "kafka":
                yield Violation(ds.name, where,
                    f"the platform does not write {c.kind} sinks yet (it writes Kafka sinks on "
                    "its own cluster, S3 sinks as Delta tables on its object store and HTTP "
                    "sinks; the mock client accepts every sink and, like Fennel's, writes "
                    "nothing)",
                    "sink to a Kafka topic on the platform's cluster, to an S3 Delta table or "
                    "to an HTTP endpoint, read the dataset's offline Delta table instead, or "
                    "select this sink out with env=")  # fmt: skip
                continue
            cfg = dict(c.config)
            if not cfg.get("topic"):
                yield Violation(ds.name, where, "names no topic",
                                f"use {c.name}.topic('<topic>') in @sink")  # fmt: skip
            servers = str(cfg.get("bootstrap_servers") or "")
            platform = get_settings().kafka_servers if servers else ""
            if servers and _servers(servers) != _servers(platform):
                yield Violation(ds.name, where,
                    f"the platform does not write sinks on another Kafka cluster ({servers}): "
                    "it writes a sink exactly once, in the transaction that reads the dataset, "
                    f"and one transaction cannot span clusters (the platform's is {platform})",
                    f"give Kafka(name={c.name!r}, bootstrap_servers={platform!r}) (or no "
                    "bootstrap_servers) and mirror the topic to the other cluster, or select "
                    "this sink out with env=")  # fmt: skip


def _s3_sink(name: str, where: str, out: SinkSpec,
             tables: dict[tuple[str, str], str]) -> Iterable[Violation]:  # fmt: skip
    """An S3 sink is a Delta table the offline writer fills, incrementally, with the dataset's
    columns as they are, in a bucket of the platform's object store other than its own."""
    cfg = dict(out.connector.config)
    bucket, fmt = str(cfg.get("bucket") or ""), cfg.get("format")
    if fmt != "delta":
        yield Violation(name, where, f"the platform writes S3 sinks as Delta tables, not {fmt!r}",
                        "give format='delta' in .bucket(...)")  # fmt: skip
    if out.how != "incremental" or out.cdc is not None:
        yield Violation(name, where, "an S3 sink is written incrementally, with no cdc",
                        "give how='incremental' and no cdc= in @sink")  # fmt: skip
    if not bucket:
        yield Violation(name, where, "names no bucket",
                        f"use {out.connector.name}.bucket('<bucket>', prefix='<prefix>')")  # fmt: skip
    if cfg.get("path"):
        yield Violation(name, where, "gives path= (a sink writes a table under a prefix)",
                        f"use {out.connector.name}.bucket({bucket!r}, prefix='<prefix>')")  # fmt: skip
    for bad, what in ((bool(out.renames), "renames="), (out.since is not None, "since="),
                      (out.until is not None, "until=")):  # fmt: skip
        if bad:
            yield Violation(name, where,
                f"the platform does not apply {what} to S3 sinks yet (it writes every row of "
                "the dataset, with its own column names)",
                f"drop {what} from @sink (rename or filter in a pipeline into another dataset "
                "and sink that), or select this sink out with env=")  # fmt: skip
    if out.every is not None:
        yield Violation(name, where,
            f"the platform does not apply every={out.every}s to S3 sinks (its writer appends "
            "each batch of changes as it comes, not on a schedule)",
            "drop every= from @sink, or select this sink out with env=")  # fmt: skip
    platform = get_settings().s3_bucket
    if bucket == platform:
        yield Violation(name, where,
            f"writes into the platform's own bucket {platform!r}, which holds its offline "
            "tables and snapshots",
            "sink to another bucket of the object store")  # fmt: skip
    if not bucket or bucket == platform:
        return
    prefix = str(cfg.get("prefix") or "").strip("/")
    here = (bucket, f"{prefix}/" if prefix else "")
    for (b, p), other in tables.items():
        nested = p.startswith(here[1]) or here[1].startswith(p)
        if b == bucket and nested and ((b, p) != here or other != name):  # one's own: deduped
            yield Violation(name, where,
                f"writes s3://{bucket}/{here[1]}, where the S3 sink of {other} writes "
                f"s3://{b}/{p}: one Delta table holds one dataset's rows",
                "give each dataset's sink a prefix of its own")  # fmt: skip
    tables.setdefault(here, name)


def _http_sink(name: str, where: str, out: SinkSpec, committed: bool) -> Iterable[Violation]:
    """An HTTP sink needs a host the platform can read (not a secret: it resolves none) and,
    when new in this commit, an endpoint whose ``healthz`` answers 2xx, as Fennel checks."""
    cfg = dict(out.connector.config)
    conn = out.connector.name
    for ref, what in (("host_ref", "host"), ("ca_cert_ref", "ca_cert")):
        if cfg.get(ref):
            yield Violation(name, where,
                f"its {what} is a Secret, and the platform resolves no AWS secrets",
                f"give HTTP(name={conn!r}, {what}=...) its value (e.g. from an environment "
                "variable), or select this sink out with env=")  # fmt: skip
    host = str(cfg.get("host") or "")
    if cfg.get("host_ref"):
        return
    if urlsplit(host).scheme not in ("http", "https") or not urlsplit(host).netloc:
        yield Violation(name, where, f"host {host!r} is not an http:// or https:// URL",
                        f"give HTTP(name={conn!r}, host='https://<host>:<port>')")  # fmt: skip
        return
    if committed or cfg.get("ca_cert_ref"):
        return  # checked when it was first committed; a later commit does not depend on it
    import httpx  # here: every process that validates a commit would pay its import

    target = HttpEndpoint.of(out.connector)
    try:
        answer = httpx.get(target.healthz_url, timeout=HEALTHZ_TIMEOUT_S, verify=target.verify())
        problem = None if answer.is_success else f"answered {answer.status_code}"
    except (httpx.HTTPError, ssl.SSLError) as e:
        problem = f"failed: {type(e).__name__}: {e}"
    if problem is not None:
        yield Violation(name, where, f"the sink's health check GET {target.healthz_url} {problem}",
            "start the endpoint or fix host=/healthz= (the platform, like Fennel, checks an "
            "HTTP sink when it is committed), or select this sink out with env=")  # fmt: skip


def _servers(bootstrap: str) -> frozenset[str]:
    """A ``bootstrap.servers`` list as a set of ``host:port`` (scheme and case aside)."""
    out = set()
    for s in bootstrap.split(","):
        s = s.strip().lower().split("://", 1)[-1]
        host, _, port = s.rpartition(":")
        host = "localhost" if host in ("127.0.0.1", "[::1]", "::1") else host
        out.add(f"{host}:{port}" if host else s)
    return frozenset(x for x in out if x)


PLATFORM_RULES = (engine_connectors, sinks)
