"""Every validation rule of a commit, each a small function returning its errors.

``validate(commit, previous)`` runs them all and returns every error at once. ``previous``
is the branch's committed graph (None for a first commit); rules about immutability,
version propagation and two-step deletion compare against it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping

from fennel_dagster.commit.errors import CommitRejected, Violation
from fennel_dagster.commit.executable import engine_shapes
from fennel_dagster.commit.graph import EntityGraph
from fennel_dagster.commit.infer import (
    TypeErrorInExpr,
    UnknownColumn,
    base,
    infer_pipeline,
    same_type,
    show,
    strip_optional,
    type_of,
)
from fennel_dagster.commit.wellformed import well_formed
from fennel_dagster.declare.dtypes import render
from fennel_dagster.wire import spec
from fennel_dagster.wire.codec import content_hash

Rule = Callable[[EntityGraph, EntityGraph | None], Iterable[Violation]]


def owners(g: EntityGraph, prev: EntityGraph | None) -> Iterable[Violation]:
    for ds in g.datasets.values():
        if not ds.meta.owner:
            yield Violation(
                ds.name, "", "has no owner", "add @meta(owner='team@example.com') above @dataset"
            )
    for fs in g.featuresets.values():
        if not fs.meta.owner:
            yield Violation(
                fs.name, "", "has no owner", "add @meta(owner='team@example.com') above @featureset"
            )


def source_xor_pipeline(g: EntityGraph, prev: EntityGraph | None) -> Iterable[Violation]:
    for ds in g.datasets.values():
        if ds.sources and ds.pipelines:
            yield Violation(ds.name, "", "has both a @source and a @pipeline",
                                  "a dataset gets rows from sources or from pipelines, not both: split it in two")  # fmt: skip
        # neither is allowed, as in Fennel: the dataset stays empty until a test logs to it
        # (``fennel_dagster.mock.log``) or a later commit gives it a source or a pipeline


def cdc_vs_keys(g: EntityGraph, prev: EntityGraph | None) -> Iterable[Violation]:
    for ds in g.datasets.values():
        for src in ds.sources:
            where = f"@source {src.connector.kind} {src.connector.name}"
            if src.cdc in ("upsert", "debezium") and not ds.keys:
                yield Violation(ds.name, where, f"cdc={src.cdc!r} needs key fields",
                                      "declare the key with field(key=True), or use cdc='append'")  # fmt: skip
            if src.cdc == "append" and ds.keys:
                yield Violation(ds.name, where, "cdc='append' on a keyed dataset",
                                      "use cdc='upsert' (rows replace earlier rows of the same key)")  # fmt: skip


POLLED_SOURCES = ("postgres", "s3")
"""Sources read by polling (``batch.pg_ingest``, ``batch.s3_ingest``): the ones that can end."""


def unread_source_options(g: EntityGraph, prev: EntityGraph | None) -> Iterable[Violation]:
    """``bounded``/``idleness`` on a source the platform reads continuously (Kafka, webhook):
    only the pollers of Postgres and S3 sources stop asking an exhausted bounded source
    (``batch.exhaustion``), so elsewhere a commit that asks for it is refused rather than
    silently read as an unbounded source."""
    for ds in g.datasets.values():
        for src in ds.sources:
            if not src.bounded or src.connector.kind in POLLED_SOURCES:
                continue
            where = f"@source {src.connector.kind} {src.connector.name}"
            yield Violation(ds.name, where,
                f"source parameter `bounded`=True (with `idleness`) is not supported on "
                f"{src.connector.kind} sources: the platform reads them continuously and "
                "never closes one after a quiet spell (it does for Postgres and S3 sources)",
                "remove bounded= and idleness= from @source (the source is then read as "
                "unbounded, which gives the same rows while data keeps arriving)")  # fmt: skip


def source_filters(g: EntityGraph, prev: EntityGraph | None) -> Iterable[Violation]:
    """A source's ``where=`` expression is typed over the dataset's fields, so a bad one is
    rejected here rather than by the first rows logged. One that reads a raw column beyond
    the fields cannot be typed and is left to the runtime."""
    for ds in g.datasets.values():
        types = {f.name: f.dtype for f in ds.fields}
        for src in ds.sources:
            if src.where is None or isinstance(src.where, spec.UserCode):
                continue
            where = f"@source {src.connector.kind} {src.connector.name} where"
            try:
                t = type_of(src.where, types)
            except UnknownColumn:
                continue
            except TypeErrorInExpr as e:
                yield Violation(ds.name, where, str(e), e.fix or "fix the expression")
                continue
            if not isinstance(base(strip_optional(t)), spec.BoolType):
                yield Violation(ds.name, where, f"{show(src.where)} is {render(t)}, not boolean",
                                "compare or test a column, e.g. col('x') > 0")  # fmt: skip


def timestamps_and_keys(g: EntityGraph, prev: EntityGraph | None) -> Iterable[Violation]:
    for ds in g.datasets.values():
        stamps = [f for f in ds.fields if f.timestamp]
        if len(stamps) != 1:
            yield Violation(
                ds.name,
                "",
                f"has {len(stamps)} timestamp fields",
                "mark exactly one datetime field with field(timestamp=True)",
            )
        for f in ds.fields:
            if f.key and isinstance(f.dtype, spec.OptionalType):
                yield Violation(
                    ds.name, f.name, "key field is Optional", "keys cannot be null: drop Optional"
                )
            if f.key and f.timestamp:
                yield Violation(
                    ds.name, f.name, "is both key and timestamp", "use a separate event-time field"
                )


def pipeline_inputs(g: EntityGraph, prev: EntityGraph | None) -> Iterable[Violation]:
    """Every dataset a pipeline reads is in the commit (or, incremental, on the branch)."""
    readers: dict[str, list[str]] = {}
    for ds in g.datasets.values():
        for p in ds.pipelines:
            for name in p.inputs:
                if name not in g.datasets:
                    readers.setdefault(name, []).append(f"{ds.name}.{p.name}")
    for name, pipes in readers.items():
        yield Violation(", ".join(pipes), f"input {name}", f"reads dataset {name}, which is not in the commit",
                        f"add {name} to the commit",
                        f"Dataset `{name}` is an input to the pipelines: `{pipes}` but is not "
                        "synced. Please add it to the sync call.")  # fmt: skip


def pipeline_schemas(g: EntityGraph, prev: EntityGraph | None) -> Iterable[Violation]:
    for ds in g.datasets.values():
        yield from pipeline_schema_problems(ds, g.datasets)


def pipeline_schema_problems(
    ds: spec.DatasetSpec, datasets: Mapping[str, spec.DatasetSpec]
) -> Iterable[Violation]:
    """Each pipeline of ``ds`` type-checks and produces exactly ``ds``'s fields (also what
    ``@dataset`` checks as it runs, as Fennel does)."""
    for p in ds.pipelines:
        if any(i not in datasets for i in p.inputs):
            continue  # an input not declared here: the commit's graph rules name it
        schema, errors = infer_pipeline(p, datasets)
        yield from errors
        if schema is None:
            continue
        yield from _compare_schema(ds, p, schema)


def _compare_schema(
    ds: spec.DatasetSpec, p: spec.PipelineSpec, got: list[spec.FieldSpec]
) -> Iterable[Violation]:
    entity = f"{ds.name}.{p.name}"
    declared = {f.name: f for f in ds.fields}
    inferred = {f.name: f for f in got}
    for name in declared.keys() - inferred.keys():
        yield Violation(entity, name, f"the pipeline does not produce field {name!r} of {ds.name}",
                              f"add it in the pipeline (assign) or remove it from {ds.name}")  # fmt: skip
    for name in inferred.keys() - declared.keys():
        yield Violation(entity, name, f"the pipeline produces field {name!r}, which {ds.name} does not declare",
                              f"declare `{name}: {render(inferred[name].dtype)}` in {ds.name} or drop it in the pipeline")  # fmt: skip
    for name in declared.keys() & inferred.keys():
        d, i = declared[name], inferred[name]
        if not same_type(d.dtype, i.dtype):
            yield Violation(entity, name, f"{ds.name}.{name} is declared {render(d.dtype)} but the pipeline produces {render(i.dtype)}",
                                  f"declare `{name}: {render(i.dtype)}` or cast it in the pipeline")  # fmt: skip
        if d.key != i.key:
            want = "a key" if i.key else "not a key"
            yield Violation(entity, name, f"the pipeline makes {name!r} {want} but {ds.name} declares otherwise",
                                  f"{'add' if i.key else 'remove'} field(key=True) on {ds.name}.{name}")  # fmt: skip
        if d.timestamp != i.timestamp:
            yield Violation(entity, name, f"the pipeline's timestamp field differs from {ds.name}'s",
                                  "keep the input's timestamp field, or rename it to the declared one")  # fmt: skip


def terminal_inputs(g: EntityGraph, prev: EntityGraph | None) -> Iterable[Violation]:
    for ds in g.datasets.values():
        for p in ds.pipelines:
            for name in p.inputs:
                src = g.datasets.get(name)
                if src is not None and src.terminal:
                    yield Violation(f"{ds.name}.{p.name}", f"input {name}",
                                          f"{name} is a continuous-window aggregate, which cannot feed another pipeline",
                                          f"look {name} up from an extractor, or aggregate with a Tumbling/Hopping window instead")  # fmt: skip


_LOOKUP = re.compile(r"\b([A-Z]\w*)\.lookup\(")


def copied_featuresets(g: EntityGraph, prev: EntityGraph | None) -> Iterable[Violation]:
    """A featureset whose code ships (it has a Python extractor, or one takes an input from
    it) ships the featuresets its ``F(Other.feature)`` copies name, and theirs in turn: each
    must be in the commit, as Fennel requires. A featureset of copies and lookups only ships
    no code, so a featureset it copies from may stay outside the commit (a query gives it)."""
    shipped: list[str] = []
    for fs in g.featuresets.values():
        for ex in fs.extractors:
            if ex.kind == "python":
                shipped.append(fs.name)
                shipped.extend(i.split(".", 1)[0] for i in ex.inputs)
    seen: set[str] = set()
    reported: set[str] = set()
    while shipped:
        name = shipped.pop(0)
        if name in seen or name not in g.featuresets:
            continue
        seen.add(name)
        for ex in g.featuresets[name].extractors:
            if ex.kind != "alias" or not ex.inputs:
                continue
            source = ex.inputs[0].split(".", 1)[0]
            if source == name:
                continue
            if source in g.featuresets:
                shipped.append(source)
            elif source not in reported:
                reported.add(source)
                yield Violation(
                    f"{name}.{ex.name}", ex.inputs[0],
                    f"copies {ex.inputs[0]} (F({ex.inputs[0]})) and ships with its code, but "
                    f"featureset {source} is not in the commit",
                    f"add {source} to the commit",
                    f"Featureset `{source}` is required by `{name}` but is not present in the "
                    "sync call. Please ensure that all featuresets are present in the sync call.",
                )  # fmt: skip


def extractors(g: EntityGraph, prev: EntityGraph | None) -> Iterable[Violation]:
    produced: dict[str, str] = {}
    for fs in g.featuresets.values():
        for ex in fs.extractors:
            entity = f"{fs.name}.{ex.name}"
            for o in ex.outputs:
                full = f"{fs.name}.{o}"
                if full in produced:
                    yield Violation(entity, o, f"feature {full} is also computed by {produced[full]}",
                                          "keep one extractor per feature: remove it from one @outputs")  # fmt: skip
                produced[full] = entity
            for i in ex.inputs:
                owner, short = i.split(".", 1)
                other = g.featuresets.get(owner)
                # as in Fennel, a featureset outside the commit may provide inputs: queries
                # give them (``inputs=[Request.uid]``); a known featureset must declare it
                if other is not None and short not in {f.name for f in other.features}:
                    yield Violation(
                        entity,
                        i,
                        f"input feature {i} is not a feature of {owner}",
                        f"declare `{short}` in {owner}, or name one of its features",
                    )
            for d in ex.deps:
                if d not in g.datasets:
                    yield Violation(
                        entity,
                        d,
                        f"depends on dataset {d}, which is not in the commit",
                        f"add {d} to the commit",
                        f"Dataset `{d}` not found in sync call",
                    )
            if ex.kind in ("lookup", "list_lookup"):
                ds = g.datasets.get(ex.lookup_dataset or "")
                if ds is not None and ex.lookup_field not in {f.name for f in ds.fields}:
                    yield Violation(
                        entity,
                        ex.outputs[0],
                        f"{ds.name} has no field {ex.lookup_field!r}",
                        "look up an existing field",
                    )
            if ex.code is not None:
                for used in sorted(set(_LOOKUP.findall(ex.code.source))):
                    if used in g.datasets and used not in ex.deps:
                        yield Violation(entity, used, f"looks up {used} without declaring it",
                                              f"add it: @extractor(deps=[{used}, ...])")  # fmt: skip
    yield from _cycles(g)


def _cycles(g: EntityGraph) -> Iterable[Violation]:
    producers = {
        f"{fs.name}.{o}": ex
        for fs in g.featuresets.values()
        for ex in fs.extractors
        for o in ex.outputs
    }
    state: dict[str, int] = {}
    reported: set[str] = set()

    def visit(feature: str, path: list[str]) -> Iterable[Violation]:
        if state.get(feature) == 2:
            return
        if state.get(feature) == 1:
            cycle = path[path.index(feature) :] + [feature]
            key = min(cycle)
            if key not in reported:
                reported.add(key)
                ex = producers[feature]
                yield Violation(f"{ex.featureset}.{ex.name}", feature, "extractors form a cycle: " + " -> ".join(cycle),
                                      "break the cycle: one of these features must be an input, not computed from the others")  # fmt: skip
            return
        state[feature] = 1
        maker = producers.get(feature)
        for dep in maker.inputs if maker else ():
            if dep in producers:
                yield from visit(dep, [*path, feature])
        state[feature] = 2

    for f in sorted(producers):
        yield from visit(f, [])


def windows(g: EntityGraph, prev: EntityGraph | None) -> Iterable[Violation]:
    for ds in g.datasets.values():
        for p in ds.pipelines:
            for node in p.nodes:
                if not isinstance(node, spec.AggregateNode):
                    continue
                for a in node.aggs:
                    w = a.window
                    forever = w.kind == "hopping" and w.duration is None  # Hopping("forever")
                    length = w.stride if forever else w.duration
                    if w.kind in ("tumbling", "hopping") and (length or 0) <= 0:
                        yield Violation(
                            f"{ds.name}.{p.name}",
                            a.into,
                            "window has no length",
                            "give a positive duration",
                        )
                    if w.kind in ("continuous", "forever") and node.emit == "final":
                        yield Violation(f"{ds.name}.{p.name}", a.into, "emit='final' with a continuous window",
                                              "continuous windows never close: use emit='eager', or a Tumbling window")  # fmt: skip


def immutability(g: EntityGraph, prev: EntityGraph | None) -> Iterable[Violation]:
    if prev is None:
        return
    bumped: dict[str, int] = {}
    for ds in g.datasets.values():
        old = prev.datasets.get(ds.name)
        if old is None:
            continue
        if ds.version < old.version:
            yield Violation(ds.name, "version", f"version went down from {old.version} to {ds.version}",
                            f"versions only grow: use {old.version + 1}", _bump_text(ds.name))  # fmt: skip
            continue
        if ds.version > old.version:
            bumped[ds.name] = ds.version
            continue
        changes = _what_changed(old, ds)
        if changes:
            downstream = [d for d in g.downstream(ds.name) if d in prev.datasets]
            tail = f" (downstream {', '.join(downstream)} must bump too)" if downstream else ""
            yield Violation(ds.name, changes[0], f"{', '.join(changes)} changed but {ds.name}.version is still {ds.version}",
                            f"bump it to {ds.version + 1}{tail}", _bump_text(ds.name))  # fmt: skip
            bumped[ds.name] = ds.version + 1  # report downstream as if it had been bumped
    for name in bumped:
        for down in g.downstream(name):
            new, old = g.datasets.get(down), prev.datasets.get(down)
            if new is None or old is None or new.version > old.version:
                continue
            yield Violation(down, "version", f"its input {name} got a new version but {down}.version is still {new.version}",
                                  f"bump {down} to {old.version + 1} so it is recomputed from {name}'s new version")  # fmt: skip


def _bump_text(name: str) -> str:
    return f"Please update version of dataset: `{name}`"


def featureset_supersets(g: EntityGraph, prev: EntityGraph | None) -> Iterable[Violation]:
    """An incremental commit may add features to a committed featureset, not remove any
    (Fennel's rule): queries and extractors of other featuresets may read them."""
    if prev is None or not g.incremental:
        return
    for fs in g.featuresets.values():
        old = prev.featuresets.get(fs.name)
        if old is None:
            continue
        gone = [f.name for f in old.features if f.name not in {n.name for n in fs.features}]
        if gone:
            yield Violation(fs.name, ", ".join(gone), f"the incremental commit removes feature(s) {', '.join(gone)}",
                            f"keep every feature of {fs.name}, or commit the whole graph without incremental=True",
                            f"Featureset {fs.name} is not a superset of the existing featureset")  # fmt: skip


def _what_changed(old: spec.DatasetSpec, new: spec.DatasetSpec) -> list[str]:
    out = []
    if old.fields != new.fields:
        out.append("schema")
    if content_hash(old.pipelines) != content_hash(new.pipelines):
        names = sorted({p.name for p in old.pipelines} | {p.name for p in new.pipelines})
        changed = [n for n in names if _pipe(old, n) != _pipe(new, n)]
        out.extend(f"pipeline {new.name}.{n}" for n in changed)
    if old.sources != new.sources:
        out.append("source")
    return out


def _pipe(ds: spec.DatasetSpec, name: str) -> spec.PipelineSpec | None:
    return next((p for p in ds.pipelines if p.name == name), None)


def deletions(g: EntityGraph, prev: EntityGraph | None) -> Iterable[Violation]:
    if prev is None or g.incremental:
        return
    for name, old in prev.datasets.items():
        if name not in g.datasets and not old.meta.deleted:
            yield Violation(name, "", "was removed from the commit without being marked deleted",
                                  f"delete in two commits: first commit {name} with @meta(deleted=True), then omit it")  # fmt: skip
    for name, old_fs in prev.featuresets.items():
        if name not in g.featuresets and not old_fs.meta.deleted:
            yield Violation(name, "", "was removed from the commit without being marked deleted",
                                  f"delete in two commits: first commit {name} with @meta(deleted=True), then omit it")  # fmt: skip


def deleted_not_used(g: EntityGraph, prev: EntityGraph | None) -> Iterable[Violation]:
    for ds in g.datasets.values():
        if not ds.meta.deleted:
            continue
        for down in g.downstream(ds.name):
            if not g.datasets[down].meta.deleted:
                yield Violation(down, f"input {ds.name}", f"reads {ds.name}, which is marked deleted",
                                      f"delete {down} too, or stop reading {ds.name}")  # fmt: skip


RULES: tuple[Rule, ...] = (
    owners, source_xor_pipeline, cdc_vs_keys, unread_source_options, source_filters,
    timestamps_and_keys, pipeline_inputs, pipeline_schemas, terminal_inputs, extractors,
    copied_featuresets, windows, immutability, featureset_supersets, deletions,
    deleted_not_used, engine_shapes,
)  # fmt: skip


def validate(
    commit: spec.CommitSpec,
    previous: spec.CommitSpec | None = None,
    extra: tuple[Rule, ...] = (),
) -> list[Violation]:
    """Every error of ``commit`` against the branch's ``previous`` commit; ``extra`` rules
    run after the common ones (the definition server adds ``PLATFORM_RULES``)."""
    structural = well_formed(commit)
    if structural:
        return structural
    if previous is not None and well_formed(previous):
        previous = None  # a malformed history cannot be compared against; judge the commit alone
    prev = EntityGraph.build(previous) if previous is not None else None
    graph = EntityGraph.build(commit, base=previous if commit.incremental else None)
    errors: list[Violation] = []
    for rule in RULES + extra:
        errors.extend(rule(graph, prev))
    return errors


def validate_or_raise(commit: spec.CommitSpec, previous: spec.CommitSpec | None = None) -> None:
    errors = validate(commit, previous)
    if errors:
        raise CommitRejected(errors)


__all__ = ["RULES", "CommitRejected", "Violation", "validate", "validate_or_raise"]
