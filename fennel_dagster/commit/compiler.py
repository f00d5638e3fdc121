"""Entity graph -> blueprints: the topics, jobs, indices, prefixes and tables a graph needs.

Identity. A dataset's *physical hash* covers what its data is — its schema, version,
sources and pipelines, and the physical hashes of its inputs — and nothing cosmetic (owner,
description, tags) and nothing about the branch. So an isomorphic dataset declared on two
branches is one set of physical assets, an unchanged dataset keeps its hash across commits,
and a version bump changes the hash of the dataset and of everything downstream of it.

Partitioning. Every dataset topic has ``partitions`` partitions and is keyed by its key
fields (keyless datasets: by the hash of the whole row), so a keyed dataset's pipeline and
index jobs are co-partitioned with it: job partition ``p`` reads partition ``p`` of its
inputs and writes partition ``p`` of its output. A pipeline whose stateful operator groups
or joins by other columns than its input's partitioning gets a ``repartition`` topic keyed
by those columns, written by the job's first stage and read by its second.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from fennel_dagster.commit.blueprint import Blueprint, BlueprintSet
from fennel_dagster.commit.graph import EntityGraph
from fennel_dagster.wire import spec
from fennel_dagster.wire.codec import to_jsonable

DEFAULT_PARTITIONS = 4
STATEFUL = (spec.AggregateNode, spec.JoinNode, spec.FirstNode, spec.LatestNode, spec.DedupNode)


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
    return any(isinstance(n, STATEFUL) for n in p.nodes)


def _partition_keys(
    p: spec.PipelineSpec, datasets: dict[str, spec.DatasetSpec]
) -> list[str] | None:
    """The columns the first keyed operator partitions by (None: no repartition needed).

    Joins need none: every partition of a pipeline job indexes the whole right-hand dataset
    (a broadcast join), so a join works on any keys, and two joins on different keys work.
    """
    for node in p.nodes:
        if isinstance(node, spec.AggregateNode | spec.FirstNode | spec.LatestNode):
            return list(node.keys)
    return None


def compile_blueprints(
    graph: EntityGraph, namespace: str = "fd", partitions: int = DEFAULT_PARTITIONS
) -> BlueprintSet:
    hashes = dataset_hashes(graph)
    out: list[Blueprint] = []
    topic_of: dict[str, str] = {}
    for ds in graph.topological():
        if ds.meta.deleted:
            continue
        h = hashes[ds.name]
        base = f"{namespace}.ds.{_safe(ds.name)}.v{ds.version}"
        ident = {"dataset": h}
        topic = _bp("topic", base, ds.name, ident, {
            "partitions": partitions, "key_fields": list(ds.keys), "role": "dataset",
            "configs": {"retention.ms": str(ds.history * 1000), "cleanup.policy": "delete"},
        })  # fmt: skip
        errors = _bp("topic", f"{namespace}.err.{_safe(ds.name)}.v{ds.version}", ds.name, {**ident, "role": "error"}, {
            "partitions": 1, "key_fields": [], "role": "error", "configs": {"retention.ms": str(14 * 86400 * 1000)},
        })  # fmt: skip
        out += [topic, errors]
        topic_of[ds.name] = topic.name
        schema = to_jsonable(ds)
        for i, src in enumerate(ds.sources):
            sident = {**ident, "source": i}
            replay = _replaylog(f"{namespace}.replay.{_safe(ds.name)}.src{i}", f"{ds.name}#source{i}", sident)
            inbox = None
            if src.connector.kind == "webhook":
                # rows logged to a webhook endpoint land here; shared by every dataset on it
                endpoint = f"{src.connector.name}.{dict(src.connector.config).get('endpoint', '')}"
                inbox = _bp("topic", f"{namespace}.webhook.{_safe(endpoint)}", f"{ds.name}#source{i}", {"webhook": endpoint}, {
                    "partitions": partitions, "key_fields": [], "role": "webhook", "configs": {"cleanup.policy": "delete"},
                })  # fmt: skip
                out.append(inbox)
            job = _bp("job", f"{namespace}.job.{_safe(ds.name)}.src{i}", f"{ds.name}#source{i}", sident, {
                "job_kind": "source", "partitions": partitions, "inputs": [], "external": to_jsonable(src),
                "outputs": [topic.name], "error_topic": errors.name, "state": False, "dataset": schema,
                "replaylog": replay.name, "webhook_topic": inbox.name if inbox is not None else None,
            })  # fmt: skip
            out += [replay, job]
        for p in ds.pipelines:
            jname = f"{namespace}.job.{_safe(ds.name)}.{_safe(p.name)}"
            jident = {**ident, "pipeline": p.name}
            replay = _replaylog(f"{namespace}.replay.{_safe(ds.name)}.{_safe(p.name)}", f"{ds.name}.{p.name}", jident)
            stateful = _stateful(p)
            repart = _partition_keys(p, graph.datasets)
            repart_topic = None
            if repart is not None:
                repart_topic = _bp("topic", f"{namespace}.repart.{_safe(ds.name)}.{_safe(p.name)}", f"{ds.name}.{p.name}", {**jident, "role": "repartition"}, {
                    "partitions": partitions, "key_fields": repart, "role": "repartition", "configs": {"cleanup.policy": "delete"},
                })  # fmt: skip
                out.append(repart_topic)
            lookups = sorted({n.right for n in p.nodes if isinstance(n, spec.JoinNode)})
            job_spec: dict[str, Any] = {
                "job_kind": "pipeline", "partitions": partitions,
                "inputs": [topic_of[i] for i in p.inputs if i in topic_of],
                "input_topics": {i: topic_of[i] for i in p.inputs if i in topic_of},
                "outputs": [topic.name], "error_topic": errors.name, "replaylog": replay.name,
                "state": stateful, "pipeline": to_jsonable(p), "dataset": schema,
                "input_datasets": {i: to_jsonable(graph.datasets[i]) for i in p.inputs if i in graph.datasets},
                "lookups": lookups,
                "lookup_topics": {r: topic_of[r] for r in lookups if r in topic_of},
                "lookup_datasets": {r: to_jsonable(graph.datasets[r]) for r in lookups if r in graph.datasets},
                "partition_by": repart or [],
                "repartition_topic": repart_topic.name if repart_topic is not None else None,
            }  # fmt: skip
            job = _bp("job", jname, f"{ds.name}.{p.name}", jident, job_spec)
            out += [replay, job]
            if stateful:
                out.append(
                    _bp(
                        "snapshot_prefix",
                        f"snapshots/{_safe(ds.name)}.{_safe(p.name)}",
                        f"{ds.name}.{p.name}",
                        {**jident, "role": "snapshots"},
                        {"bucket_prefix": f"snapshots/{job.name}/"},
                    )
                )
        if ds.keys and (ds.index or ds.online):
            iident = {**ident, "role": "index"}
            replay = _replaylog(f"{namespace}.replay.{_safe(ds.name)}.index", f"{ds.name}#index", iident)
            idx_job = _bp("job", f"{namespace}.index.{_safe(ds.name)}.v{ds.version}", f"{ds.name}#index", iident, {
                "job_kind": "index", "partitions": partitions, "inputs": [topic.name], "outputs": [],
                "state": True, "dataset": schema, "online": ds.online, "offline": ds.offline,
                "error_topic": errors.name, "replaylog": replay.name,
            })  # fmt: skip
            out += [replay, idx_job]
            out.append(
                _bp(
                    "snapshot_prefix",
                    f"snapshots/{_safe(ds.name)}.index",
                    f"{ds.name}#index",
                    {**ident, "role": "index-snapshots"},
                    {"bucket_prefix": f"snapshots/{idx_job.name}/"},
                )
            )
        if ds.offline:
            out.append(_bp("offline_table", f"offline/{_safe(ds.name)}/v{ds.version}", ds.name, {**ident, "role": "offline"}, {
                "bucket_prefix": f"offline/{_safe(ds.name)}/v{ds.version}/{h[:12]}/", "format": "parquet", "source_topic": topic.name,
            }))  # fmt: skip
    return BlueprintSet(tuple(sorted(out, key=lambda b: (b.kind, b.name))))
