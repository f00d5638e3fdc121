"""Hypothesis strategies for every IR class, derived from the dataclasses' own type hints."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from hypothesis import strategies as st

from fennel_dagster.wire import spec
from fennel_dagster.wire.codec import type_hints_of

_names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_ABCXYZ0123456789.", min_size=1, max_size=12)
_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**53), 2**53), st.floats(allow_nan=False), _names
)
_cache: dict[Any, st.SearchStrategy[Any]] = {}


def strategy_for(tp: Any) -> st.SearchStrategy[Any]:
    key = repr(tp)
    if key in _cache:
        return _cache[key]
    _cache[key] = st.deferred(lambda: _build(tp))
    return _cache[key]


def _build(tp: Any) -> st.SearchStrategy[Any]:
    if tp is spec.DType:
        return st.one_of(*(for_class(c) for c in typing.get_args(spec.DType)))
    if tp is spec.Expr:
        return st.one_of(*(for_class(c) for c in typing.get_args(spec.Expr)))
    if tp is spec.Node:
        return st.one_of(*(for_class(c) for c in typing.get_args(spec.Node)))
    if tp is object:
        return _scalars
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Literal:
        return st.sampled_from(args)
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*(strategy_for(a) for a in args))
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return st.lists(strategy_for(args[0]), max_size=3).map(tuple)
        return st.tuples(*(strategy_for(a) for a in args))
    if tp is type(None):
        return st.none()
    if tp is bool:
        return st.booleans()
    if tp is int:
        return st.integers(-(2**53), 2**53)
    if tp is float:
        return st.floats(allow_nan=False, allow_infinity=True)
    if tp is str:
        return st.text(max_size=20)
    if dataclasses.is_dataclass(tp):
        return for_class(tp)
    raise TypeError(f"no strategy for {tp!r}")


def for_class(cls: type) -> st.SearchStrategy[Any]:
    hints = type_hints_of(cls)
    fields = {f.name: strategy_for(hints[f.name]) for f in dataclasses.fields(cls)}
    return st.builds(cls, **fields)


ENTITY_KINDS = [
    c for c in vars(spec).values()
    if isinstance(c, type) and dataclasses.is_dataclass(c) and c.__module__ == spec.__name__
]  # fmt: skip
