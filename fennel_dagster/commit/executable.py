"""Rules about what the executors can run: refused at commit, never found out by a runner.

- ``engine_shapes`` (definition server and mock alike): pipeline shapes the engine cannot
  cut into stages (``commit.stages``).
- ``engine_connectors`` (definition server only: the mock reads no connector, rows are
  logged to it directly): sources the streaming engine has no reader for, and sinks, which
  the platform does not write yet.
"""

from __future__ import annotations

from collections.abc import Iterable

from fennel_dagster.commit.errors import Violation
from fennel_dagster.commit.graph import EntityGraph
from fennel_dagster.commit.stages import problems

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
    for ds in g.datasets.values():
        for out in ds.sinks:
            c = out.connector
            yield Violation(ds.name, f"sink {c.kind}({c.name})",
                "the platform does not write sinks yet (the mock client accepts them and, like "
                "Fennel's, writes nothing)",
                "read the dataset's own Kafka topic or its offline Delta table instead, or "
                "select this sink out with env=")  # fmt: skip


PLATFORM_RULES = (engine_connectors, sinks)
