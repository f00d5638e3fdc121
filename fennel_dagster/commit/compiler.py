"""Entity graph -> blueprints: the topics, jobs, indices, prefixes and tables a graph needs.

Identity. A dataset's *physical hash* covers what its data is — its schema, version,
sources and pipelines, and the physical hashes of its inputs — and nothing cosmetic (owner,
description, tags) and nothing about the branch. So an isomorphic dataset declared on two
branches is one set of physical assets, an unchanged dataset keeps its hash across commits,
and a version bump changes the hash of the dataset and of everything downstream of it.

Partitioning. Every dataset topic has ``partitions`` partitions and is keyed by its key
fields (keyless datasets: by the hash of the whole row), so a keyed dataset's pipeline and
index jobs are co-partitioned with it: job partition ``p`` reads partition ``p`` of its
inputs and writes partition ``p`` of its output. A pipeline whose keyed operator groups by
other columns than its input's partitioning gets a ``repartition`` topic keyed by those
columns, written by the job's first stage and read by its second (``commit.stages``).

Jobs. Each job blueprint carries its typed spec (``wire.plan``), the one contract the engine,
lookups, client, mock and Dagster read. Lookups of a dataset are answered by exactly one
job: the pipeline job of a terminal continuous aggregate (its windows decay at lookup time),
else the dataset's index job; nothing is compiled that nothing reads.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import replace
from typing import Any

from fennel_dagster.commit.blueprint import Blueprint, BlueprintSet
from fennel_dagster.commit.graph import EntityGraph
from fennel_dagster.commit.infer import node_schemas
from fennel_dagster.commit.stages import STATEFUL_NODES, cut_of
from fennel_dagster.ops.aggregate import is_continuous
from fennel_dagster.ops.limits import DATASET_TOPIC_MAX_BYTES, ERROR_TOPIC_MAX_BYTES
from fennel_dagster.wire import plan, spec
from fennel_dagster.wire.codec import from_jsonable, to_jsonable

DEFAULT_PARTITIONS = 4


def _digest(value: Any) -> str:
    return hashlib.sha256(
        json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def _physical(ds: spec.DatasetSpec) -> dict[str, Any]:
    """What a dataset's data *is* (no meta: owners and descriptions are not physical)."""
    return {
        "name": ds.name,
        "version": ds.version,
        "fields": to_jsonable(ds.fields),
        "sources": to_jsonable(ds.sources),
        "pipelines": to_jsonable(ds.pipelines),
        "history": ds.history,
    }


def dataset_hashes(graph: EntityGraph) -> dict[str, str]:
    hashes: dict[str, str] = {}
    for ds in graph.topological():
        ups = {i: hashes.get(i, "external") for i in graph.inputs_of(ds.name)}
        hashes[ds.name] = _digest({"dataset": _physical(ds), "inputs": ups})
    return hashes


def _bp(
    kind: Any, prefix: str, entity: str, ident: dict[str, Any], spec_pairs: dict[str, Any]
) -> Blueprint:
    h = _digest({"kind": kind, **ident})
    name = f"{prefix}.{h[:12]}" if kind in ("topic", "job", "index") else f"{prefix}/{h[:12]}"
    return Blueprint(
        kind=kind, name=name, hash=h, entity=entity, spec=tuple(sorted(spec_pairs.items()))
    )


def _replaylog(prefix: str, entity: str, ident: dict[str, Any]) -> Blueprint:
    """A job's single-partition log of batch markers (seed 003), kept as long as inputs."""
    return _bp("topic", prefix, entity, {**ident, "role": "replaylog"}, {
        "partitions": 1, "key_fields": [], "role": "replaylog", "configs": {"cleanup.policy": "delete"},
    })  # fmt: skip


def _stateful(p: spec.PipelineSpec) -> bool:
    return any(isinstance(n, STATEFUL_NODES) for n in p.nodes)


def terminal_aggregate(ds: spec.DatasetSpec) -> plan.AggregateServing | None:
    """The continuous aggregate whose state answers lookups of ``ds`` (None: its index)."""
    for p in ds.pipelines:
        last = {n.id: n for n in p.nodes}[p.output]
        if isinstance(last, spec.AggregateNode) and is_continuous(last):
            return plan.AggregateServing(f"{ds.name}.{p.name}", last)
    return None


def job_blueprint(prefix: str, entity: str, ident: dict[str, Any], job: plan.JobSpec) -> Blueprint:
    """A job's blueprint: its name is derived from ``ident`` (so ``job.name`` must match)."""
    bp = _bp("job", prefix, entity, ident, {
        "kind": job.KIND, "partitions": job.partitions, "plan": to_jsonable(job),
    })  # fmt: skip
    assert bp.name == job.name, (bp.name, job.name)
    return bp


def job_of(bp: Blueprint) -> plan.JobSpec:
    """The typed job spec a job blueprint carries."""
    job = from_jsonable(bp.spec_dict()["plan"])
    assert isinstance(job, plan.JOB_SPECS), f"blueprint {bp.name} holds no job spec"
    return job


def jobs_of(blueprints: BlueprintSet) -> tuple[plan.JobSpec, ...]:
    return tuple(job_of(bp) for bp in blueprints.of_kind("job"))


def _name(kind: str, prefix: str, ident: dict[str, Any]) -> str:
    return f"{prefix}.{_digest({'kind': kind, **ident})[:12]}"


class _Compiler:
    def __init__(self, graph: EntityGraph, namespace: str, partitions: int) -> None:
        self.graph = graph
        self.ns = namespace
        self.partitions = partitions
        self.hashes = dataset_hashes(graph)
        self.topic_of: dict[str, str] = {}
        self.out: list[Blueprint] = []

    def topic(self, prefix: str, entity: str, ident: dict[str, Any], role: str,
              partitions: int, keys: list[str], configs: dict[str, str]) -> Blueprint:  # fmt: skip
        bp = _bp("topic", prefix, entity, {**ident, "role": role} if role != "dataset" else ident, {
            "partitions": partitions, "key_fields": keys, "role": role, "configs": configs,
        })  # fmt: skip
        self.out.append(bp)
        return bp

    def replaylog(self, prefix: str, entity: str, ident: dict[str, Any]) -> str:
        bp = _replaylog(prefix, entity, ident)
        self.out.append(bp)
        return bp.name

    def snapshots(self, prefix: str, entity: str, ident: dict[str, Any], job: str) -> None:
        self.out.append(
            _bp(
                "snapshot_prefix",
                prefix,
                entity,
                ident,
                {"bucket_prefix": plan.snapshot_prefix(job)},
            )
        )

    def dataset(self, ds: spec.DatasetSpec) -> None:
        ns, h, safe = self.ns, self.hashes[ds.name], _safe(ds.name)
        ident = {"dataset": h}
        topic = _bp("topic", f"{ns}.ds.{safe}.v{ds.version}", ds.name, ident, {
            "partitions": self.partitions, "key_fields": list(ds.keys), "role": "dataset",
            "configs": {"retention.ms": str(ds.history * 1000), "cleanup.policy": "delete",
                        "max.message.bytes": str(DATASET_TOPIC_MAX_BYTES)},
        })  # fmt: skip
        errors = _bp("topic", f"{ns}.err.{safe}.v{ds.version}", ds.name, {**ident, "role": "error"}, {
            "partitions": 1, "key_fields": [], "role": "error",
            "configs": {"retention.ms": str(14 * 86400 * 1000),
                        "max.message.bytes": str(ERROR_TOPIC_MAX_BYTES)},
        })  # fmt: skip
        self.out += [topic, errors]
        self.topic_of[ds.name] = topic.name
        for i, src in enumerate(ds.sources):
            self.source(ds, i, src, ident, topic.name, errors.name)
        serving = terminal_aggregate(ds)
        for p in ds.pipelines:
            serves = (
                serving if serving is not None and serving.scope == f"{ds.name}.{p.name}" else None
            )
            self.pipeline(ds, p, ident, topic.name, errors.name, serves)
        if ds.keys and (ds.index or ds.online) and serving is None:
            self.index(ds, ident, topic.name, errors.name)
        if ds.offline:
            self.offline(ds, ident, topic.name, errors.name)
        for out in dict.fromkeys(_kafka_sinks(ds)):
            self.kafka_sink(ds, out, ident, topic.name, errors.name)
        for out in _s3_sinks(ds):
            self.s3_sink(ds, out, ident, topic.name, errors.name)
        for out in dict.fromkeys(_http_sinks(ds)):
            self.http_sink(ds, out, ident, topic.name, errors.name)

    def source(self, ds: spec.DatasetSpec, i: int, src: spec.SourceSpec, ident: dict[str, Any],
               topic: str, errors: str) -> None:  # fmt: skip
        ns, safe = self.ns, _safe(ds.name)
        sident = {**ident, "source": i}
        entity = f"{ds.name}#source{i}"
        replay = self.replaylog(f"{ns}.replay.{safe}.src{i}", entity, sident)
        config = dict(src.connector.config)
        inbox: plan.WebhookInbox | None = None
        if src.connector.kind == "webhook":
            # rows logged to a webhook endpoint land here; shared by every dataset on it
            endpoint = str(config.get("endpoint", ""))
            where = f"{src.connector.name}.{endpoint}"
            bp = _bp("topic", f"{ns}.webhook.{_safe(where)}", entity, {"webhook": where}, {
                "partitions": self.partitions, "key_fields": [], "role": "webhook", "configs": {"cleanup.policy": "delete"},
            })  # fmt: skip
            self.out.append(bp)
            inbox = plan.WebhookInbox(src.connector.name, endpoint, bp.name, self.partitions)
        if src.connector.kind in ("s3", "postgres"):
            external = self.ingest(ds, i, src, sident, entity, errors)
        else:
            external = inbox.topic if inbox is not None else str(config.get("topic", ""))
        prefix = f"{ns}.job.{safe}.src{i}"
        job = plan.SourceJobSpec(
            name=_name("job", prefix, sident), partitions=self.partitions, dataset=ds, source=src,
            output_topic=topic, error_topic=errors, replaylog=replay, external_topic=external,
            webhook=inbox,
        )  # fmt: skip
        self.out.append(job_blueprint(prefix, entity, sident, job))
        # its state (the watermark) is snapshotted like any job's: the bank owns the prefix
        self.snapshots(f"snapshots/{safe}.src{i}", entity, {**sident, "role": "snapshots"},
                       job.name)  # fmt: skip

    def ingest(self, ds: spec.DatasetSpec, i: int, src: spec.SourceSpec, sident: dict[str, Any],
               entity: str, errors: str) -> str:  # fmt: skip
        """A source Spark reads (S3 files, a Postgres table): its inbox topic (the rows, sent
        by Spark), its ledger (files sent, or the cursor reached), and the ingest job; returns
        the inbox, which the source job reads like a Kafka topic."""
        ns, safe = self.ns, _safe(ds.name)
        kind = "s3" if src.connector.kind == "s3" else "pg"
        inbox = self.topic(f"{ns}.{kind}inbox.{safe}.src{i}", entity, sident,
                           f"{kind}-inbox", self.partitions, [], {"cleanup.policy": "delete"})  # fmt: skip
        ledger = self.topic(f"{ns}.{kind}ledger.{safe}.src{i}", entity, sident,
                            f"{kind}-ledger", 1, [], {"cleanup.policy": "compact"})  # fmt: skip
        prefix = f"{ns}.{kind}ingest.{safe}.src{i}"
        iident = {**sident, "role": f"{kind}-ingest"}
        spec_type = plan.S3IngestJobSpec if kind == "s3" else plan.PostgresIngestJobSpec
        job = spec_type(
            name=_name("job", prefix, iident), partitions=1, dataset=ds, source=src,
            inbox_topic=inbox.name, inbox_partitions=self.partitions, ledger_topic=ledger.name,
            error_topic=errors,
        )  # fmt: skip
        self.out.append(job_blueprint(prefix, entity, iident, job))
        return inbox.name

    def pipeline(self, ds: spec.DatasetSpec, p: spec.PipelineSpec, ident: dict[str, Any], topic: str,
                 errors: str, serves: plan.AggregateServing | None) -> None:  # fmt: skip
        ns, safe, graph = self.ns, _safe(ds.name), self.graph
        entity = f"{ds.name}.{p.name}"
        jident = {**ident, "pipeline": p.name}
        replay = self.replaylog(f"{ns}.replay.{safe}.{_safe(p.name)}", entity, jident)
        joined = sorted({n.right for n in p.nodes if isinstance(n, spec.JoinNode)})
        datasets = {**graph.datasets, ds.name: ds}
        cut = cut_of(p, datasets, ds)
        repartition: plan.Repartition | None = None
        if cut is not None:
            bp = self.topic(f"{ns}.repart.{safe}.{_safe(p.name)}", entity, jident, "repartition",
                            self.partitions, list(cut.keys), {"cleanup.policy": "delete",
                            "max.message.bytes": str(DATASET_TOPIC_MAX_BYTES)})  # fmt: skip
            schema = tuple(node_schemas(p, datasets)[cut.node])
            repartition = plan.Repartition(bp.name, cut.keys, cut.node, schema)
        prefix = f"{ns}.job.{safe}.{_safe(p.name)}"
        job = plan.PipelineJobSpec(
            name=_name("job", prefix, jident), partitions=self.partitions, dataset=ds, pipeline=p,
            inputs=tuple(plan.DatasetStream(graph.datasets[i], self.topic_of[i])
                         for i in p.inputs if i in self.topic_of and i not in joined),
            lookups=tuple(plan.DatasetStream(graph.datasets[r], self.topic_of[r])
                          for r in joined if r in self.topic_of),
            output_topic=topic, error_topic=errors, replaylog=replay,
            stateful=_stateful(p), repartition=repartition, serves=serves,
        )  # fmt: skip
        self.out.append(job_blueprint(prefix, entity, jident, job))
        # stateless too: its state (input offsets, replaylog marker) is snapshotted like any
        # job's, so the bank owns the prefix, destroys it with the job, and a job deleted and
        # committed again meets a new incarnation instead of the deleted one's snapshots
        self.snapshots(f"snapshots/{safe}.{_safe(p.name)}", entity,
                       {**jident, "role": "snapshots"}, job.name)  # fmt: skip

    def index(self, ds: spec.DatasetSpec, ident: dict[str, Any], topic: str, errors: str) -> None:
        ns, safe = self.ns, _safe(ds.name)
        entity = f"{ds.name}#index"
        iident = {**ident, "role": "index"}
        replay = self.replaylog(f"{ns}.replay.{safe}.index", entity, iident)
        prefix = f"{ns}.index.{safe}.v{ds.version}"
        job = plan.IndexJobSpec(
            name=_name("job", prefix, iident), partitions=self.partitions, dataset=ds,
            input_topic=topic, error_topic=errors, replaylog=replay,
        )  # fmt: skip
        self.out.append(job_blueprint(prefix, entity, iident, job))
        self.snapshots(
            f"snapshots/{safe}.index", entity, {**ident, "role": "index-snapshots"}, job.name
        )

    def offline(self, ds: spec.DatasetSpec, ident: dict[str, Any], topic: str,
                errors: str) -> None:  # fmt: skip
        """The dataset's Delta table (one per physical version) and the job that fills it."""
        ns, h, safe = self.ns, self.hashes[ds.name], _safe(ds.name)
        entity = f"{ds.name}#offline"
        bucket_prefix = f"offline/{safe}/v{ds.version}/{h[:12]}/"
        self.out.append(_bp("offline_table", f"offline/{safe}/v{ds.version}", ds.name, {**ident, "role": "offline"}, {
            "bucket_prefix": bucket_prefix, "format": "delta", "source_topic": topic,
        }))  # fmt: skip
        prefix = f"{ns}.offline.{safe}.v{ds.version}"
        oident = {**ident, "role": "offline-writer"}
        job = plan.OfflineJobSpec(
            name=_name("job", prefix, oident), partitions=1,
            table=plan.OfflineTable(ds, f"{ns}/{bucket_prefix}"), input_topic=topic,
            error_topic=errors,
        )  # fmt: skip
        self.out.append(job_blueprint(prefix, entity, oident, job))

    def kafka_sink(self, ds: spec.DatasetSpec, out: spec.SinkSpec, ident: dict[str, Any],
                   topic: str, errors: str) -> None:  # fmt: skip
        """A Kafka sink's job: the dataset's topic -> Debezium change events on the sink's
        topic (the user's, on the platform's cluster; not ours to create or delete)."""
        ns, safe = self.ns, _safe(ds.name)
        external = str(dict(out.connector.config).get("topic", ""))
        label = f"sink-{_safe(external).replace('.', '_')}"
        entity = f"{ds.name}#{label}"
        sident = {**ident, "role": "kafka-sink", "connector": to_jsonable(out.connector),
                  "cdc": out.cdc}  # fmt: skip
        replay = self.replaylog(f"{ns}.replay.{safe}.{label}", entity, sident)
        prefix = f"{ns}.sink.{safe}.v{ds.version}.{label}"
        job = plan.KafkaSinkJobSpec(
            name=_name("job", prefix, sident), partitions=self.partitions, dataset=ds, sink=out,
            input_topic=topic, output_topic=external, error_topic=errors, replaylog=replay,
        )  # fmt: skip
        self.out.append(job_blueprint(prefix, entity, sident, job))
        self.snapshots(f"snapshots/{safe}.{label}", entity, {**sident, "role": "sink-snapshots"},
                       job.name)  # fmt: skip

    def s3_sink(self, ds: spec.DatasetSpec, out: spec.SinkSpec, ident: dict[str, Any],
                topic: str, errors: str) -> None:  # fmt: skip
        """An S3 sink's job: the dataset's topic -> a Delta table at the sink's bucket and
        prefix, written by the offline writer (the bucket is the user's: no blueprint of ours
        creates or deletes it)."""
        ns, safe = self.ns, _safe(ds.name)
        bucket, prefix = _s3_location(out)
        label = f"sink-{_safe(f'{bucket}/{prefix}'.rstrip('/')).replace('.', '_')}"
        sident = {**ident, "role": "s3-sink", "bucket": bucket, "prefix": prefix}
        name_prefix = f"{ns}.s3sink.{safe}.v{ds.version}.{label}"
        job = plan.S3SinkJobSpec(
            name=_name("job", name_prefix, sident), partitions=1,
            table=plan.OfflineTable(ds, prefix, bucket), sink=out, input_topic=topic,
            error_topic=errors,
        )  # fmt: skip
        self.out.append(job_blueprint(name_prefix, f"{ds.name}#{label}", sident, job))

    def http_sink(self, ds: spec.DatasetSpec, out: spec.SinkSpec, ident: dict[str, Any],
                  topic: str, errors: str) -> None:  # fmt: skip
        """An HTTP sink: a change job writes the dataset's changes, exactly once, to an outbox
        topic of ours (kept 7 days: an endpoint down longer loses its oldest changes), and a
        delivery job POSTs the outbox to the endpoint. The two are apart so that a slow or
        failing endpoint holds back only its own delivery, never the engine's transactions."""
        ns, safe = self.ns, _safe(ds.name)
        cfg = dict(out.connector.config)
        where = f"{out.connector.name}{cfg.get('endpoint', '')}"
        label = f"http-{_safe(where).replace('.', '_')}"
        entity = f"{ds.name}#{label}"
        sident = {**ident, "role": "http-sink", "connector": to_jsonable(out.connector),
                  "cdc": out.cdc}  # fmt: skip
        outbox = self.topic(f"{ns}.httpout.{safe}.v{ds.version}.{label}", entity, sident,
                            "http-outbox", self.partitions, [],
                            {"cleanup.policy": "delete", "retention.ms": str(7 * 86400 * 1000)})  # fmt: skip
        replay = self.replaylog(f"{ns}.replay.{safe}.{label}", entity, sident)
        cident = {**sident, "role": "http-changes"}
        prefix = f"{ns}.sink.{safe}.v{ds.version}.{label}"
        changes = plan.KafkaSinkJobSpec(
            name=_name("job", prefix, cident), partitions=self.partitions, dataset=ds, sink=out,
            input_topic=topic, output_topic=outbox.name, error_topic=errors, replaylog=replay,
        )  # fmt: skip
        self.out.append(job_blueprint(prefix, entity, cident, changes))
        self.snapshots(f"snapshots/{safe}.{label}", entity, {**sident, "role": "sink-snapshots"},
                       changes.name)  # fmt: skip
        dprefix = f"{ns}.httpsink.{safe}.v{ds.version}.{label}"
        dident = {**sident, "role": "http-delivery"}
        delivery = plan.HttpSinkJobSpec(
            name=_name("job", dprefix, dident), partitions=self.partitions, dataset=ds, sink=out,
            input_topic=outbox.name, error_topic=errors,
        )  # fmt: skip
        self.out.append(job_blueprint(dprefix, entity, dident, delivery))


def _s3_location(out: spec.SinkSpec) -> tuple[str, str]:
    """An S3 sink's (bucket, key prefix of its Delta table, "/" last unless empty)."""
    cfg = dict(out.connector.config)
    prefix = str(cfg.get("prefix") or "").strip("/")
    return str(cfg.get("bucket") or ""), f"{prefix}/" if prefix else ""


def _s3_sinks(ds: spec.DatasetSpec) -> list[spec.SinkSpec]:
    """The dataset's S3 sinks, one per table location (after env=; the rest of what the
    platform cannot write was refused at commit, ``commit.executable``)."""
    by_location: dict[tuple[str, str], spec.SinkSpec] = {}
    for s in ds.sinks:
        if s.connector.kind == "s3":
            by_location.setdefault(_s3_location(s), replace(s, env=()))
    return list(by_location.values())


def _kafka_sinks(ds: spec.DatasetSpec) -> list[spec.SinkSpec]:
    """The dataset's Kafka sinks, once each (the env= selection already applied; sinks the
    platform cannot write were refused at commit, ``commit.executable``)."""
    return [replace(s, env=()) for s in ds.sinks if s.connector.kind == "kafka"]


def _http_sinks(ds: spec.DatasetSpec) -> list[spec.SinkSpec]:
    """The dataset's HTTP sinks, once each (as ``_kafka_sinks``)."""
    return [replace(s, env=()) for s in ds.sinks if s.connector.kind == "http"]


def compile_blueprints(
    graph: EntityGraph, namespace: str = "fd", partitions: int = DEFAULT_PARTITIONS
) -> BlueprintSet:
    c = _Compiler(graph, namespace, partitions)
    for ds in graph.topological():
        if not ds.meta.deleted:
            c.dataset(ds)
    return BlueprintSet(tuple(sorted(c.out, key=lambda b: (b.kind, b.name))))
