"""``@featureset``, ``feature`` and ``@extractor``/``@outputs``, and their IR."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import pandas as pd

from fennel_dagster.declare.dataset import Field
from fennel_dagster.declare.dtypes import to_dtype
from fennel_dagster.declare.errors import DeclarationError
from fennel_dagster.declare.expr import Expr
from fennel_dagster.declare.meta import meta_of
from fennel_dagster.wire import spec
from fennel_dagster.wire.usercode import UserCodeError, capture

T = TypeVar("T")


@dataclass
class Feature:
    """A feature; ``User.spend_7d`` is one (``str()`` gives ``"User.spend_7d"``)."""

    ref: Any = None  # a dataset Field (lookup), a Feature (alias) or an Expr
    default: Any = None
    version: int = 0
    description: str = ""
    name: str = ""
    featureset: str = ""

    def fqn(self) -> str:
        return f"{self.featureset}.{self.name}"

    def meta(
        self,
        owner: str = "",
        description: str = "",
        tags: list[str] | None = None,
        deleted: bool = False,
    ) -> Feature:
        """Fennel's ``feature(...).meta(description=...)``: the description is kept (owner and
        tags are the featureset's)."""
        return dataclasses.replace(self, description=description or self.description)

    def __str__(self) -> str:
        return self.fqn()

    def __eq__(self, other: object) -> bool:
        """As in Fennel: a named feature equals another of its name, or its name as text
        (``Features.all() == ["Features.age", ...]``)."""
        if isinstance(other, str):
            return bool(self.name) and self.fqn() == other
        if isinstance(other, Feature):
            if self.name and other.name:
                return self.fqn() == other.fqn()
            return self is other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable until @featureset names it


def feature(ref: Any = None, default: Any = None, version: int = 0, description: str = "") -> Any:
    return Feature(ref=ref, default=default, version=version, description=description)


def outputs(*items: Any) -> Callable[[T], T]:
    def mark(fn: T) -> T:
        target: Any = getattr(fn, "__func__", fn)
        target.__fennel_outputs__ = items
        return fn

    return mark


def extractor(
    fn: Any = None, *, deps: list[Any] | None = None, version: int = 0, env: Any = None
) -> Any:
    def mark(f: Any) -> Any:
        target = getattr(f, "__func__", f)
        target.__fennel_extractor__ = {
            "deps": tuple(deps or ()),
            "version": version,
            "env": tuple(sorted([env] if isinstance(env, str) else (env or []))),
        }
        return classmethod(target)

    return mark(fn) if fn is not None else mark


class Featureset:
    __fennel_featureset_name__: str
    _spec: spec.FeaturesetSpec
    original_cls: type  # the class itself: Fennel's ``Features.fn(Features.original_cls, ...)``

    @classmethod
    def spec(cls) -> spec.FeaturesetSpec:
        return featureset_spec(cls)

    @classmethod
    def all(cls) -> list[Feature]:
        """Its features in declaration order (Fennel's ``Featureset.all()``)."""
        return [getattr(cls, f.name) for f in cls._spec.features]


def _feature_name(item: Any, fs: str, where: str, own: dict[int, str] | None = None) -> str:
    if isinstance(item, Feature):
        if not item.name and own and id(item) in own:  # `@inputs(age)` in the class body
            return f"{fs}.{own[id(item)]}"
        return item.fqn()
    if isinstance(item, str):
        return item if "." in item else f"{fs}.{item}"
    raise DeclarationError(f"{where}: name features as strings or Featureset.feature, got {item!r}")


def _extractor(
    fs: str, attr: str, fn: Any, features: dict[str, Feature], own: dict[int, str]
) -> spec.ExtractorSpec:
    """``own``: the class body's feature objects by id, which ``@inputs(age)`` and
    ``@outputs(age)`` name before ``@featureset`` has named them."""
    where = f"extractor {fs}.{attr}"
    cfg = fn.__fennel_extractor__
    ins = tuple(_feature_name(i, fs, where, own) for i in getattr(fn, "__fennel_inputs__", ()))
    # as in Fennel, an extractor without @outputs computes every feature of its featureset
    outs_raw = getattr(fn, "__fennel_outputs__", None) or tuple(features)
    outs = []
    for o in outs_raw:
        full = _feature_name(o, fs, where, own)
        owner, short = full.split(".", 1)
        if owner != fs or short not in features:
            raise DeclarationError(
                f"{where} outputs {full}, which is not a feature of {fs}: an extractor computes "
                f"only its own featureset's features ({', '.join(features)})"
            )
        outs.append(short)
    params = list(inspect.signature(fn).parameters)
    if hasattr(fn, "__fennel_inputs__") and len(params) != len(ins) + 2:
        raise DeclarationError(
            f"{where} takes {len(params)} parameters but needs cls, ts and one per input "
            f"({len(ins)}): write `def {attr}(cls, ts, {', '.join(i.split('.')[1] for i in ins)})`"
        )
    deps = []
    for d in cfg["deps"]:
        name = getattr(d, "__fennel_dataset_name__", None)
        if name is None:
            raise DeclarationError(f"{where}: deps= takes @dataset classes, got {d!r}")
        deps.append(name)
    return spec.ExtractorSpec(
        name=attr, featureset=fs, kind="python", inputs=ins, outputs=tuple(outs),
        version=cfg["version"], deps=tuple(sorted(deps)), code=capture(fn), env=cfg["env"],
        meta=meta_of(fn),
    )  # fmt: skip


def _auto_extractor(
    fs: str,
    f: Feature,
    features: dict[str, Feature],
    declared: dict[int, str],
    types: dict[str, spec.DType],
) -> spec.ExtractorSpec:
    where = f"feature {fs}.{f.name}"
    ref = f.ref
    name = f"_auto_{f.name}"
    if isinstance(ref, Field):
        from fennel_dagster.declare.registry import dataset_keys

        keys = dataset_keys(ref.dataset)
        missing = [k for k in keys if k not in features]
        if missing:
            raise DeclarationError(
                f"{where} looks up {ref.qualified()}, keyed by {', '.join(keys)}, but {fs} has no "
                f"feature named {', '.join(missing)}: add `{missing[0]}: <type>` to {fs}"
            )
        # keyed by lists (user_ids: List[int]): a key per element, the answers a list
        listed = all(isinstance(_bare(types[k]), spec.ListType) for k in keys)
        return spec.ExtractorSpec(
            name=name, featureset=fs, kind="list_lookup" if listed else "lookup",
            inputs=tuple(f"{fs}.{k}" for k in keys),
            outputs=(f.name,), version=f.version, deps=(ref.dataset,),
            lookup_dataset=ref.dataset, lookup_field=ref.name, default=f.default,
        )  # fmt: skip
    if isinstance(ref, Feature):
        # a feature of this class body is named only now (``declared``: by its object)
        source = ref.fqn() if ref.name else f"{fs}.{declared.get(id(ref), '')}"
        return spec.ExtractorSpec(
            name=name, featureset=fs, kind="alias", inputs=(source,), outputs=(f.name,),
            version=f.version, default=f.default,
        )  # fmt: skip
    if isinstance(ref, Expr):
        cols = sorted(_columns(ref.to_ir()))
        unknown = [c for c in cols if c not in features]
        if unknown:
            raise DeclarationError(
                f"{where}: its expression uses {', '.join(unknown)}, not features of {fs}"
            )
        return spec.ExtractorSpec(
            name=name, featureset=fs, kind="expr", inputs=tuple(f"{fs}.{c}" for c in cols),
            outputs=(f.name,), version=f.version, expr=ref.to_ir(), default=f.default,
        )  # fmt: skip
    raise DeclarationError(
        f"{where}: feature(...) takes a dataset field (lookup), another feature (alias) or an "
        f"expression, got {ref!r}"
    )


def _columns(e: spec.Expr) -> set[str]:
    match e:
        case spec.Col(name=n):
            return {n}
        case spec.Call(args=args):
            return set().union(*(_columns(a) for a in args)) if args else set()
        case spec.When(cases=cases, otherwise=o):
            out = _columns(o)
            for c, v in cases:
                out |= _columns(c) | _columns(v)
            return out
    return set()


def featureset(cls: type) -> type:
    name = cls.__name__
    hints = typing.get_type_hints(cls)
    own = list(cls.__dict__.get("__annotations__", {}))
    if not own:
        raise DeclarationError(
            f"featureset {name} declares no features: annotate them, e.g. `uid: int`"
        )
    ns: dict[str, Any] = {
        k: v for k, v in cls.__dict__.items() if k not in ("__dict__", "__weakref__")
    }
    for k, v in list(ns.items()):  # as in Fennel: Features.fn(Features, ts, ...) in unit tests
        if hasattr(getattr(v, "__func__", v), "__fennel_extractor__"):
            ns[k] = getattr(v, "__func__", v)
    features: dict[str, Feature] = {}
    declared = {id(v): n for n in own if isinstance(v := cls.__dict__.get(n), Feature)}
    for n in own:
        decl = cls.__dict__.get(n)
        f = dataclasses.replace(decl) if isinstance(decl, Feature) else Feature()
        f.name, f.featureset = n, name
        features[n] = f
        ns[n] = f
    ns["__fennel_featureset_name__"] = name
    new = type(name, (Featureset,), ns)
    specs = tuple(
        spec.FeatureSpec(n, to_dtype(hints[n], f"{name}.{n}"), f.version, f.default, f.description)
        for n, f in features.items()
    )
    extractors = [
        _extractor(name, attr, v.__func__, features, declared)
        for attr, v in sorted(cls.__dict__.items())
        if hasattr(getattr(v, "__func__", v), "__fennel_extractor__")
    ]
    extractors += [
        _auto_extractor(name, f, features, declared, {x.name: x.dtype for x in specs})
        for f in features.values()
        if f.ref is not None
    ]
    new.original_cls = new  # type: ignore[attr-defined]
    for ex in extractors:
        if ex.kind == "python":  # called directly in a unit test, as Fennel's wrapper does
            setattr(new, ex.name, _called_directly(ns[ex.name], name, ex.inputs))
    new._spec = spec.FeaturesetSpec(  # type: ignore[attr-defined]
        name=name, features=specs, extractors=tuple(sorted(extractors, key=lambda e: e.name)),
        meta=meta_of(cls, inspect.getdoc(cls) or ""), helpers=_helpers(cls),
    )  # fmt: skip
    return new


def _called_directly(fn: Any, fs: str, inputs: tuple[str, ...]) -> Any:
    """An extractor called as ``Features.fn(Features, ts, *series)``: its inputs named by
    feature and its outputs' columns qualified by the featureset, as Fennel's are."""

    @functools.wraps(fn)
    def call(cls: Any, ts: Any, *args: Any, **kwargs: Any) -> Any:
        named = [
            a.rename(n) if isinstance(a, pd.Series) else a
            for n, a in zip(inputs, args, strict=False)
        ]
        out = fn(cls, ts, *named, *args[len(named) :], **kwargs)
        if isinstance(out, pd.Series) and out.name is not None and "." not in str(out.name):
            out = out.rename(f"{fs}.{out.name}")
        elif isinstance(out, pd.DataFrame):
            out = out.rename(columns={c: f"{fs}.{c}" for c in out.columns if "." not in str(c)})
        return out

    return call


def _bare(t: spec.DType) -> spec.DType:
    return t.of if isinstance(t, spec.OptionalType) else t


def _helpers(cls: type) -> tuple[spec.HelperSpec, ...]:
    """The featureset's methods that are not extractors, shipped so that its extractors'
    ``cls.helper(...)`` works where they run (a plain ``def`` is taken as a classmethod)."""
    out = []
    for attr, v in sorted(cls.__dict__.items()):
        fn = getattr(v, "__func__", v)
        if attr.startswith("__") or hasattr(fn, "__fennel_extractor__"):
            continue
        if not inspect.isfunction(fn):
            continue
        kind: Literal["classmethod", "staticmethod"] = (
            "staticmethod" if isinstance(v, staticmethod) else "classmethod"
        )
        try:
            code = capture(fn)
        except UserCodeError:
            continue  # not shippable: an extractor calling it is told so where it runs
        out.append(spec.HelperSpec(attr, kind, code))
    return tuple(out)


def featureset_spec(fs: Any) -> spec.FeaturesetSpec:
    base: spec.FeaturesetSpec | None = getattr(fs, "_spec", None)
    if base is None:
        raise DeclarationError(f"{fs!r} is not a @featureset class")
    meta = meta_of(fs, base.meta.description)
    return base if meta == base.meta else dataclasses.replace(base, meta=meta)
