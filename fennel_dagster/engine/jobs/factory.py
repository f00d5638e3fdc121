"""Typed job spec -> the job logic a runner drives."""

from __future__ import annotations

from collections.abc import Callable

from fennel_dagster.engine.jobs.base import JobLogic
from fennel_dagster.engine.jobs.index import IndexJob
from fennel_dagster.engine.jobs.pipeline import PipelineJob
from fennel_dagster.engine.jobs.sink import KafkaSinkJob
from fennel_dagster.engine.jobs.source import SourceJob
from fennel_dagster.wire import plan


def build_job(
    job: plan.StreamJobSpec,
    topic_partitions: Callable[[str], int],
    registry_auth: str | None = None,
) -> JobLogic:
    """``topic_partitions(topic)``: the partition count of an external (user) topic;
    ``registry_auth``: a schema registry's ``user:password`` (Avro / Protobuf sources)."""
    if isinstance(job, plan.PipelineJobSpec):
        return PipelineJob(job)
    if isinstance(job, plan.IndexJobSpec):
        return IndexJob(job)
    if isinstance(job, plan.KafkaSinkJobSpec):
        return KafkaSinkJob(job, topic_partitions(job.output_topic))
    return SourceJob(job, topic_partitions(job.external_topic), registry_auth)
