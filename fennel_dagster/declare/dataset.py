"""``@dataset``, ``field``, ``@pipeline`` and ``@inputs``, and their IR (``dataset_spec``)."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import pandas as pd

from fennel_dagster.declare import lookup as lookup_hook
from fennel_dagster.declare import registry, semantics
from fennel_dagster.declare.dtypes import to_dtype
from fennel_dagster.declare.errors import DeclarationError
from fennel_dagster.declare.meta import meta_of
from fennel_dagster.declare.pipeline import Node, PipelineBuilder
from fennel_dagster.declare.window import duration
from fennel_dagster.wire import spec
from fennel_dagster.wire.usercode import capture, shared_includes

T = TypeVar("T")


@dataclass
class Field:
    """A dataset field; ``UserSpend.spend_7d`` is one (and ``str()`` of it is its name)."""

    key: bool = False
    timestamp: bool = False
    description: str = ""
    name: str = ""
    dataset: str = ""
    dtype: Any = None
    erase_key: bool = False
    deleted: bool = False  # ``meta(deleted=True)``: refused when the dataset is declared

    def __str__(self) -> str:
        return self.name

    def qualified(self) -> str:
        return f"{self.dataset}.{self.name}"

    def meta(
        self,
        owner: str = "",
        description: str = "",
        tags: list[str] | None = None,
        deleted: bool = False,
    ) -> Field:
        """Fennel's ``field().meta(description=...)``: the description is kept (a field has no
        owner or tags of its own here; they are the dataset's); ``deleted`` is refused by the
        dataset, as Fennel's are."""
        return dataclasses.replace(
            self, description=description or self.description, deleted=deleted or self.deleted
        )


def field(
    key: bool = False, timestamp: bool = False, description: str = "", erase_key: bool = False
) -> Any:
    """A dataset field's role; ``erase_key=True`` (on a key field) makes it a key that
    ``client.erase`` requests name, to hard-erase a key's rows (Fennel's)."""
    return Field(key=key, timestamp=timestamp, description=description, erase_key=erase_key)


def inputs(*items: Any) -> Callable[[T], T]:
    """``@inputs(Txn, User)`` on a pipeline; ``@inputs("uid")`` on an extractor."""

    def mark(fn: T) -> T:
        target: Any = getattr(fn, "__func__", fn)
        target.__fennel_inputs__ = items
        return fn

    return mark


def pipeline(fn: Any = None, *, env: str | list[str] | None = None) -> Any:
    def mark(f: Any) -> Any:
        target = getattr(f, "__func__", f)
        target.__fennel_pipeline__ = tuple(sorted([env] if isinstance(env, str) else (env or [])))
        return classmethod(target) if not isinstance(f, classmethod) else f

    return mark(fn) if fn is not None else mark


class Dataset:
    """Base of every ``@dataset`` class; its IR is ``cls.spec()``."""

    __fennel_dataset_name__: str
    _spec: spec.DatasetSpec

    @classmethod
    def spec(cls) -> spec.DatasetSpec:
        return dataset_spec(cls)

    @classmethod
    def lookup(
        cls, ts: pd.Series, fields: list[str] | None = None, **keys: Any
    ) -> tuple[pd.DataFrame, pd.Series]:
        return lookup_hook.lookup(cls.__fennel_dataset_name__, ts, fields, **keys)


def _dataset_fields(cls: type, name: str) -> tuple[spec.FieldSpec, ...]:
    try:
        hints = typing.get_type_hints(cls)
    except NameError as e:
        raise DeclarationError(f"dataset {name}: a field's type cannot be resolved: {e}") from e
    own = list(cls.__dict__.get("__annotations__", {}))
    if not own:
        raise DeclarationError(f"dataset {name} declares no fields: annotate them, e.g. `uid: int`")
    decls = {n: cls.__dict__.get(n) for n in own}
    fields = []
    for n in own:
        found = decls[n]
        d = found if isinstance(found, Field) else Field()
        dtype = to_dtype(hints[n], f"{name}.{n}")
        if d.deleted:
            raise DeclarationError(
                "Dataset currently does not support deleted or deprecated fields.",
                hint=f"{name}.{n} has meta(deleted=True): remove the field from the dataset "
                "(with a version bump)",
            )
        if d.erase_key and not d.key:
            raise DeclarationError(
                f"{name}.{n} has erase_key=True but is not a key field: only keys are erased "
                f"by; declare it as `{n}: {_plain(hints[n])} = field(key=True, erase_key=True)`"
            )
        if d.key and isinstance(dtype, spec.OptionalType):
            raise DeclarationError(
                f"Key {n} in dataset {name} cannot be Optional: keys cannot be null; declare "
                f"it as `{n}: {_plain(hints[n])} = field(key=True)`"
            )
        fields.append(
            spec.FieldSpec(n, dtype, key=d.key, timestamp=d.timestamp, description=d.description)
        )
    stamps = [f for f in fields if f.timestamp]
    if len(stamps) > 1:
        raise DeclarationError(
            f"dataset {name} marks {len(stamps)} fields with timestamp=True "
            f"({', '.join(f.name for f in stamps)}): keep exactly one"
        )
    for f in stamps:
        if not isinstance(f.dtype, spec.TimestampType):
            raise DeclarationError(f"{name}.{f.name} has timestamp=True but is not a datetime")
    if not stamps:
        times = [f for f in fields if isinstance(f.dtype, spec.TimestampType) and not f.key]
        if len(times) != 1:  # Fennel's wording first: its users match on it
            found = ", ".join(f.name for f in times)
            problem = (
                "Multiple timestamp fields are not supported"
                if times
                else "No timestamp field found"
            )
            raise DeclarationError(
                f"{problem} in dataset {name}: it needs exactly one event-time field, found "
                f"datetime fields ({found or 'none'}); mark one with field(timestamp=True)"
            )
        idx = fields.index(times[0])
        fields[idx] = spec.FieldSpec(times[0].name, times[0].dtype, timestamp=True,
                                     description=times[0].description)  # fmt: skip
    return tuple(fields)


def _plain(tp: Any) -> str:
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    return getattr(args[0], "__name__", str(args[0])) if args else str(tp)


def _build_pipeline(cls: type, attr: str, fn: Any, name: str) -> spec.PipelineSpec:
    where = f"pipeline {name}.{attr}"
    ins = getattr(fn, "__fennel_inputs__", None)
    if not ins:
        raise DeclarationError(
            f"{where} has no @inputs: add @inputs(<dataset>, ...) below @pipeline"
        )
    builder = PipelineBuilder(where)
    builder.inputs = {d.name: d for item in ins if (d := getattr(item, "_spec", None)) is not None}
    proxies = []
    names = []
    for item in ins:
        ds = getattr(item, "__fennel_dataset_name__", None)
        if ds is None:
            raise DeclarationError(f"{where}: @inputs takes @dataset classes, got {item!r}")
        names.append(ds)
        proxies.append(builder.add(spec.InputNode(builder.next_id(), ds)))
    params = list(inspect.signature(fn).parameters)
    if len(params) != len(proxies) + 1:
        raise DeclarationError(
            f"{where} takes {len(params) - 1} input argument(s) but @inputs names {len(proxies)}: "
            f"write `def {attr}(cls, {', '.join(n.lower() for n in names)})`"
        )
    with shared_includes(fn):
        out = fn(cls, *proxies)
    if not isinstance(out, Node):
        raise DeclarationError(f"{where} must return the pipeline's result stream, got {out!r}")
    env = getattr(fn, "__fennel_pipeline__", ())
    return spec.PipelineSpec(
        name=attr, dataset=name, inputs=tuple(names), nodes=tuple(builder.nodes), output=out.id,
        env=env, code=capture(fn),
    )  # fmt: skip


def _is_terminal(pipes: tuple[spec.PipelineSpec, ...]) -> bool:
    for p in pipes:
        last = {n.id: n for n in p.nodes}[p.output]
        if isinstance(last, spec.AggregateNode) and any(
            a.window.kind in ("continuous", "forever") for a in last.aggs
        ):
            return True
    return False


def dataset(
    cls: type | None = None,
    *,
    version: int = 1,
    index: bool = False,
    online: bool = True,
    offline: bool = True,
    history: str = "730d",
) -> Any:
    """Declare a dataset: annotated fields, optional keys, one event time, pipelines."""

    def build(c: type) -> type:
        name = c.__name__
        if version < 1:
            raise DeclarationError(f"dataset {name}: version must be >= 1, got {version}")
        fields = _dataset_fields(c, name)
        if index and not any(f.key for f in fields):
            raise DeclarationError(
                f"dataset {name} has index=True but no key field: an index answers lookups "
                "by key; mark the key with field(key=True), or drop index=True"
            )
        erase_keys = tuple(
            n for n in c.__dict__.get("__annotations__", {})
            if isinstance(d := c.__dict__.get(n), Field) and d.erase_key
        )  # fmt: skip
        ns: dict[str, Any] = {
            k: v for k, v in c.__dict__.items() if k not in ("__dict__", "__weakref__")
        }
        for f in fields:
            ns[f.name] = Field(f.key, f.timestamp, f.description, f.name, name, f.dtype,
                               f.name in erase_keys)  # fmt: skip
        ns["__fennel_dataset_name__"] = name
        new = type(name, (Dataset,), ns)
        pipes = tuple(
            _build_pipeline(new, attr, getattr(v, "__func__", v), name)
            for attr, v in sorted(c.__dict__.items())
            if hasattr(getattr(v, "__func__", v), "__fennel_pipeline__")
        )
        exps = [
            v
            for v in c.__dict__.values()
            if getattr(getattr(v, "__func__", v), "__fennel_expectations__", False)
        ]
        expectations = None
        if exps:
            fn = exps[0].__func__
            expectations = spec.ExpectationsSpec(version=1, expectations=tuple(fn(new)))
        new._spec = spec.DatasetSpec(  # type: ignore[attr-defined]
            name=name, version=version, fields=fields, meta=meta_of(c, inspect.getdoc(c) or ""),
            index=index, online=online, offline=offline, history=duration(history, f"{name} history"),
            sources=tuple(getattr(c, "__fennel_sources__", ())), pipelines=pipes,
            expectations=expectations, terminal=_is_terminal(pipes), erase_keys=erase_keys,
        )  # fmt: skip
        registry.register(new._spec)  # type: ignore[attr-defined]
        inputs = {
            d.name: d
            for v in c.__dict__.values()
            for item in getattr(getattr(v, "__func__", v), "__fennel_inputs__", ()) or ()
            if (d := getattr(item, "_spec", None)) is not None
        }
        _check_pipelines(new._spec, inputs)  # type: ignore[attr-defined]
        return new

    return build(cls) if cls is not None else build


def _check_pipelines(ds: spec.DatasetSpec, inputs: dict[str, spec.DatasetSpec]) -> None:
    """As in Fennel, a pipeline that does not type-check or fit its dataset fails ``@dataset``
    itself (the commit checks again, against the committed graph)."""
    if not ds.pipelines or semantics.checks_deferred():
        return
    problems = semantics.installed().pipeline_problems(ds, inputs)
    if problems:
        ours = f"dataset {ds.name}: " + "; ".join(words for words, _ in problems)
        fennel = next((text for _, text in problems if text), None)
        if fennel is None:
            raise DeclarationError(ours)
        raise DeclarationError(fennel, hint=ours)  # Fennel's words first (fennel_dagster.errors)


def dataset_spec(ds: Any) -> spec.DatasetSpec:
    """The IR of a ``@dataset`` class (sources attached by ``@source`` above it included)."""
    base: spec.DatasetSpec = getattr(ds, "_spec", None)  # type: ignore[assignment]
    if base is None:
        raise DeclarationError(f"{ds!r} is not a @dataset class")
    sources = tuple(getattr(ds, "__fennel_sources__", ()))
    sinks = tuple(getattr(ds, "__fennel_sinks__", ()))
    meta = meta_of(ds, base.meta.description)
    if sources != base.sources or meta != base.meta or sinks != base.sinks:
        base = dataclasses.replace(base, sources=sources, meta=meta, sinks=sinks)
    return base
