"""Rules about what the executors can run: refused at commit, never found out by a runner.

- ``engine_shapes`` (definition server and mock alike): pipeline shapes the engine cannot
  cut into stages (``commit.stages``).
- ``engine_connectors`` (definition server only: the mock reads no connector, rows are
  logged to it directly): sources the streaming engine has no reader for.
- ``sinks`` (definition server only): sinks the platform cannot write exactly once: any but
  Kafka, and Kafka on another cluster than the platform's (a connection with no
  ``bootstrap_servers`` is the platform's, as it is for Kafka sources).
"""

from __future__ import annotations

from collections.abc import Iterable

from fennel_dagster.commit.errors import Violation
from fennel_dagster.commit.graph import EntityGraph
from fennel_dagster.commit.stages import problems
from fennel_dagster.settings import get_settings

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
            elif c.kind == "kafka" and dict(c.config).get("format", "json") != "json":
                yield Violation(ds.name, where,
                    f"the engine reads JSON topics, not {dict(c.config).get('format')} yet",
                    "produce JSON to the topic, or select this source out with env=")  # fmt: skip
            elif c.kind == "postgres":
                cfg = dict(c.config)
                for key, fix in (("host", "host="), ("db_name", "db_name=")):
                    if not cfg.get(key):
                        yield Violation(ds.name, where, f"names no {key}",
                                        f"give Postgres(name={c.name!r}, {fix}...)")  # fmt: skip
                if not cfg.get("cursor"):
                    yield Violation(ds.name, where, "has no cursor column",
                                    f"use {c.name}.table('<table>', cursor='<column>')")  # fmt: skip


def sinks(g: EntityGraph, prev: EntityGraph | None) -> Iterable[Violation]:
    """The platform writes Kafka sinks on its own cluster (in the runner's transaction: exactly
    once); a sink elsewhere, on another cluster or another kind of store, is refused."""
    for ds in g.datasets.values():
        for out in ds.sinks:
            c = out.connector
            where = f"sink {c.kind}({c.name})"
            if c.kind != "kafka":
                yield Violation(ds.name, where,
                    f"the platform does not write {c.kind} sinks yet (it writes Kafka sinks on "
                    "its own cluster; the mock client accepts every sink and, like Fennel's, "
                    "writes nothing)",
                    "sink to a Kafka topic on the platform's cluster, read the dataset's offline "
                    "Delta table instead, or select this sink out with env=")  # fmt: skip
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
