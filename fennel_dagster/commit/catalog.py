"""What is committed, per branch, as the control plane shows it: graphs and their assets.

The Dagster code location builds one asset per dataset and featureset of every branch from
this; it reads Postgres only (no Kafka, no S3), so loading the code location stays fast.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import psycopg

from fennel_dagster.commit import branches, protocol
from fennel_dagster.metadata import assets
from fennel_dagster.wire import spec


@dataclass(frozen=True)
class PhysicalAsset:
    kind: str
    name: str
    hash: str
    role: str
    partitions: int | None
    refs: int


@dataclass
class BranchCatalog:
    branch: str
    commit_id: int | None
    graph: spec.CommitSpec | None
    assets: dict[str, list[PhysicalAsset]] = field(default_factory=dict)  # by entity

    def of_dataset(self, name: str) -> list[PhysicalAsset]:
        return [
            a for entity, found in self.assets.items() for a in found
            if entity == name or entity.startswith((f"{name}.", f"{name}#"))
        ]  # fmt: skip


def load(conn: psycopg.Connection) -> list[BranchCatalog]:
    out: list[BranchCatalog] = []
    with conn.transaction():
        by_branch: dict[str, dict[str, list[PhysicalAsset]]] = defaultdict(
            lambda: defaultdict(list)
        )
        for ref in assets.all_branch_assets(conn):
            a, sp = ref.asset, ref.asset.spec or {}
            by_branch[ref.branch][a.entity].append(
                PhysicalAsset(
                    a.kind,
                    a.name,
                    a.hash,
                    str(sp.get("role") or sp.get("kind") or ""),
                    sp.get("partitions"),
                    ref.refs,
                )  # fmt: skip
            )
        for name in branches.list_branches(conn):
            graph = branches.checkout(conn, name)
            head = protocol.head(conn, name)
            out.append(BranchCatalog(name, head, graph, dict(by_branch.get(name, {}))))
    return out


def asset_path(branch: str, entity: str) -> list[str]:
    """The Dagster asset key path of a branch's dataset or featureset."""
    return [re.sub(r"[^A-Za-z0-9_]", "_", branch), entity]


def dataset_deps(ds: spec.DatasetSpec) -> list[str]:
    """Datasets a dataset's pipelines read (inputs, joined datasets): its lineage."""
    deps: set[str] = set()
    for p in ds.pipelines:
        deps.update(p.inputs)
        deps.update(n.right for n in p.nodes if isinstance(n, spec.JoinNode))
    return sorted(deps - {ds.name})


def featureset_deps(fs: spec.FeaturesetSpec) -> tuple[list[str], list[str]]:
    """(datasets looked up by its extractors, featuresets its extractors read from)."""
    datasets: set[str] = set()
    featuresets: set[str] = set()
    for ex in fs.extractors:
        datasets.update(ex.deps)
        if ex.lookup_dataset:
            datasets.add(ex.lookup_dataset)
        for inp in ex.inputs:
            owner = str(inp).split(".")[0]
            if owner != fs.name:
                featuresets.add(owner)
    return sorted(datasets), sorted(featuresets)


def describe(a: PhysicalAsset) -> dict[str, Any]:
    return {
        "kind": a.kind,
        "name": a.name,
        "role": a.role,
        "partitions": a.partitions,
        "refs": a.refs,
    }
