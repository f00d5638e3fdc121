"""Job registry row -> the job logic a runner drives."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fennel_dagster.engine.jobs.base import JobLogic
from fennel_dagster.wire import spec as wire
from fennel_dagster.wire.codec import from_jsonable


class UnsupportedJob(ValueError):
    """A job this engine cannot run (e.g. a source connector it has no reader for)."""


def external_topic(spec: dict[str, Any]) -> str:
    """The topic a source job reads: the user's Kafka topic, or the webhook's inbox topic."""
    if spec.get("webhook_topic"):
        return str(spec["webhook_topic"])
    src = from_jsonable(spec["external"])
    assert isinstance(src, wire.SourceSpec)
    config = dict(src.connector.config)
    if src.connector.kind != "kafka" or not config.get("topic"):
        raise UnsupportedJob(
            f"source {src.connector.kind}({src.connector.name}): the streaming engine reads "
            "Kafka topics and webhooks; for this source log rows with Client.log or use a "
            "Kafka/webhook source"
        )
    return str(config["topic"])


def unsupported(name: str, spec: dict[str, Any]) -> str | None:
    """Why this engine cannot run the job (None: it can); such jobs are skipped, not retried."""
    if spec.get("job_kind") != "source":
        return None
    try:
        external_topic(spec)
    except UnsupportedJob as e:
        return f"{name}: {e}"
    return None


def build_job(name: str, spec: dict[str, Any], topic_partitions: Callable[[str], int]) -> JobLogic:
    """``topic_partitions(topic)``: the partition count of an external (user) topic."""
    kind = spec["job_kind"]
    if kind == "pipeline":
        from fennel_dagster.engine.jobs.pipeline import PipelineJob

        return PipelineJob(name, spec)
    if kind == "index":
        from fennel_dagster.engine.jobs.index import IndexJob

        return IndexJob(name, spec)
    if kind == "source":
        from fennel_dagster.engine.jobs.source import SourceJob

        return SourceJob(name, spec, topic_partitions(external_topic(spec)))
    raise ValueError(f"job {name}: unknown job kind {kind!r} (expected source, pipeline or index)")
