"""Committed definitions -> software-defined assets: one per dataset and featureset, per branch.

The asset graph is the feature graph: a dataset depends on the datasets its pipelines read
and join, a featureset on the datasets its extractors look up. Materialising any selection
of a branch runs the two-ledger commit of that branch's definitions (``LocalClient.commit_spec``:
idempotent — assets already in place are kept, missing ones are created).
"""

import re
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetExecutionContext,
    AssetKey,
    AssetsDefinition,
    AssetSpec,
    FreshnessPolicy,
    MaterializeResult,
    MetadataValue,
    TableColumn,
    TableSchema,
    asset_check,
    multi_asset,
)

from fennel_dagster.client import LocalClient
from fennel_dagster.commit import branches
from fennel_dagster.commit.catalog import (
    BranchCatalog,
    asset_path,
    dataset_deps,
    describe,
    featureset_deps,
)
from fennel_dagster.commit.protocol import CommitOutcome
from fennel_dagster.commit.requests import CommitSummary
from fennel_dagster.declare.dtypes import render
from fennel_dagster.quality.expectations import run, sample
from fennel_dagster.serve.graphql import featureset_sdl
from fennel_dagster.settings import get_settings
from fennel_dagster.wire import spec

KIND_ORDER = ("kafka", "rocksdb", "spark")


def group_of(branch: str) -> str:
    return "branch_" + re.sub(r"[^A-Za-z0-9_]", "_", branch)


def key_of(branch: str, entity: str) -> AssetKey:
    return AssetKey(asset_path(branch, entity))


def _owners(meta: spec.MetaSpec) -> list[str]:
    owner = meta.owner or ""
    return [owner] if "@" in owner or owner.startswith("team:") else []


def _schema(ds: spec.DatasetSpec) -> TableSchema:
    cols = []
    for f in ds.fields:
        flags = ["key"] if f.key else []
        flags += ["timestamp"] if f.name == ds.timestamp else []
        cols.append(TableColumn(f.name, render(f.dtype), description=", ".join(flags) or None))
    return TableSchema(columns=cols)


def _source(ds: spec.DatasetSpec) -> str:
    if ds.sources:
        return "; ".join(
            f"{s.connector.kind}({s.connector.name}) {dict(s.connector.config)} cdc={s.cdc} "
            f"disorder={s.disorder}s"
            for s in ds.sources
        )
    return "pipelines: " + ", ".join(p.name for p in ds.pipelines) if ds.pipelines else "none"


def dataset_spec(cat: BranchCatalog, ds: spec.DatasetSpec) -> AssetSpec:
    physical = cat.of_dataset(ds.name)
    topic = next((a for a in physical if a.kind == "topic" and a.role == "dataset"), None)
    kinds = {"kafka", "postgres"}
    if ds.index or ds.online or any(p for p in ds.pipelines):
        kinds.add("rocksdb")
    if ds.offline and len(kinds) < 3:
        kinds.add("spark")
    metadata: dict[str, Any] = {
        "dagster/column_schema": _schema(ds),
        "version": ds.version,
        "branch": cat.branch,
        "commit": cat.commit_id,
        "source": _source(ds),
        "physical assets": MetadataValue.json([describe(a) for a in physical]),
    }
    if ds.sources:  # how event time is judged: what is late, what is too far ahead
        src = ds.sources[0]
        metadata.update({
            "event time: disorder (s)": src.disorder,
            "event time: max_future (s)": src.max_future,
            "event time: earliest": src.earliest,
        })  # fmt: skip
    if topic is not None:
        metadata.update({
            "blueprint hash": topic.hash, "topic": topic.name,
            "partitions": topic.partitions or 0, "ref count": topic.refs,
        })  # fmt: skip
    return AssetSpec(
        key_of(cat.branch, ds.name),
        deps=[key_of(cat.branch, d) for d in dataset_deps(ds)]
        + [source_key(cat.branch, s) for s in ds.sources],
        description=ds.meta.description or f"dataset {ds.name}",
        metadata=metadata,
        group_name=group_of(cat.branch),
        owners=_owners(ds.meta),
        kinds=kinds,
        tags={"fennel/entity": "dataset"},
        freshness_policy=(
            FreshnessPolicy.time_window(fail_window=timedelta(minutes=15)) if ds.index else None
        ),
        code_version=str(ds.version),
    )


def source_key(branch: str, src: spec.SourceSpec) -> AssetKey:
    c = src.connector
    where = dict(c.config)
    what = where.get("topic") or where.get("table") or where.get("prefix") or \
        where.get("path") or where.get("endpoint") or ""  # fmt: skip
    return AssetKey([group_of(branch)[len("branch_"):], "source",
                     re.sub(r"[^A-Za-z0-9_]", "_", f"{c.kind}_{c.name}_{what}".strip("_"))])  # fmt: skip


def source_specs(cat: BranchCatalog) -> list[AssetSpec]:
    """Each source a branch's datasets read (a Kafka topic, an S3 prefix, a Postgres table,
    a webhook endpoint): an external asset, where the lineage starts."""
    graph = cat.graph
    out: dict[AssetKey, AssetSpec] = {}
    for ds in graph.datasets if graph is not None else ():
        for src in () if ds.meta.deleted else ds.sources:
            key = source_key(cat.branch, src)
            c = src.connector
            out[key] = AssetSpec(
                key, description=f"{c.kind} source {c.name}: {dict(c.config)}",
                group_name=group_of(cat.branch), kinds={c.kind},
                metadata={"connector": c.kind, "connection": c.name,
                          "config": MetadataValue.json(dict(c.config))},
                tags={"fennel/entity": "source"},
            )  # fmt: skip
    return list(out.values())


def featureset_spec(
    cat: BranchCatalog, fs: spec.FeaturesetSpec, sdl: dict[str, str] | None = None
) -> AssetSpec:
    """``sdl``: each featureset's GraphQL type, as the query servers serve it."""
    datasets, featuresets = featureset_deps(fs)
    graphql: dict[str, Any] = {}
    if sdl and fs.name in sdl:
        graphql = {
            "GraphQL type": MetadataValue.md(f"```graphql\n{sdl[fs.name]}\n```"),
            "GraphQL endpoint": MetadataValue.url(f"{get_settings().serve_url}/graphql"),
        }
    return AssetSpec(
        key_of(cat.branch, fs.name),
        deps=[key_of(cat.branch, d) for d in [*datasets, *featuresets]],
        description=fs.meta.description or f"featureset {fs.name}",
        metadata={
            "features": MetadataValue.md(
                "\n".join(f"- `{f.name}`: {render(f.dtype)}" for f in fs.features)
            ),
            "extractors": ", ".join(e.name for e in fs.extractors),
            "branch": cat.branch,
            "commit": cat.commit_id,
            **graphql,
        },
        group_name=group_of(cat.branch),
        owners=_owners(fs.meta),
        kinds={"python", "postgres"},
        tags={"fennel/entity": "featureset"},
    )


def branch_assets(cat: BranchCatalog) -> AssetsDefinition | None:
    graph = cat.graph
    if graph is None or not (graph.datasets or graph.featuresets):
        return None
    specs = [dataset_spec(cat, d) for d in graph.datasets if not d.meta.deleted]
    sdl = featureset_sdl(cat.branch, cat.commit_id, graph) if graph.featuresets else {}
    specs += [featureset_spec(cat, f, sdl) for f in graph.featuresets]
    specs = _topological(specs)
    order = [s.key for s in specs]
    branch = cat.branch

    @multi_asset(
        specs=specs,
        name=f"commit_{group_of(branch)}",
        can_subset=True,
        required_resource_keys={"fennel"},
    )
    def commit_branch(context: AssetExecutionContext) -> Iterator[MaterializeResult]:
        settings = context.resources.fennel.settings()
        t0 = time.monotonic()
        with LocalClient(settings, branch=branch) as client:
            with client.conn.transaction():
                committed = branches.checkout(client.conn, branch)
            if committed is None:
                raise ValueError(f"branch {branch!r} has nothing committed to materialise")
            out = client.commit_spec(committed, branch=branch)
        assert isinstance(out, CommitOutcome), out  # not a preview, not a Dagster request
        result = CommitSummary.of(out)
        elapsed = time.monotonic() - t0
        for key in [k for k in order if k in context.selected_asset_keys]:
            yield MaterializeResult(
                asset_key=key,
                metadata={
                    "commit": result.commit_id,
                    "created": len(result.created),
                    "reused": len(result.reused),
                    "kept": len(result.kept),
                    "destroyed": len(result.released),
                    "diff": MetadataValue.json(result.to_json()),
                    "duration s": round(elapsed, 3),
                },
            )

    return commit_branch


def _topological(specs: list[AssetSpec]) -> list[AssetSpec]:
    """Dependencies first: a multi-asset must yield its outputs in that order."""
    by_key = {s.key: s for s in specs}
    done: dict[AssetKey, AssetSpec] = {}

    def visit(s: AssetSpec) -> None:
        if s.key in done:
            return
        for d in s.deps:
            if d.asset_key in by_key:
                visit(by_key[d.asset_key])
        done[s.key] = s

    for s in specs:
        visit(s)
    return list(done.values())


def expectation_checks(cat: BranchCatalog) -> list[AssetChecksDefinition]:
    graph = cat.graph
    if graph is None:
        return []
    out = []
    for ds in graph.datasets:
        if ds.expectations is None or not ds.expectations.expectations or ds.meta.deleted:
            continue
        out.append(_check(cat, ds))
    return out


def _check(cat: BranchCatalog, ds: spec.DatasetSpec) -> AssetChecksDefinition:
    topic = next(
        (a.name for a in cat.of_dataset(ds.name) if a.kind == "topic" and a.role == "dataset"), None
    )

    @asset_check(
        asset=key_of(cat.branch, ds.name),
        name="expectations",
        description=f"great-expectations suite of {ds.name} on its newest rows",
        required_resource_keys={"kafka"},
        blocking=False,
    )
    def expectations(context: AssetCheckExecutionContext) -> AssetCheckResult:
        assert ds.expectations is not None
        df = sample(context.resources.kafka.servers(), topic or "", ds) if topic else None
        if df is None or df.empty:
            return AssetCheckResult(
                passed=True, severity=AssetCheckSeverity.WARN,
                metadata={"rows": 0, "note": "no rows yet: nothing to check"},
            )  # fmt: skip
        results = run(ds.expectations.expectations, df)
        failed = [r for r in results if not r.success]
        return AssetCheckResult(
            passed=not failed,
            severity=AssetCheckSeverity.ERROR,
            description=(
                "all expectations met"
                if not failed
                else "failed: " + "; ".join(f"{r.expectation}({r.kwargs})" for r in failed)
            ),  # fmt: skip
            metadata={
                "rows": len(df),
                "results": MetadataValue.json(
                    [
                        {
                            "expectation": r.expectation,
                            "kwargs": r.kwargs,
                            "success": r.success,
                            "details": r.details,
                        }
                        for r in results
                    ]  # fmt: skip
                ),
            },
        )

    return expectations
