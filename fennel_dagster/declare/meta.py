"""``@meta(owner=, description=, tags=, deleted=)`` for datasets, featuresets and more."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from fennel_dagster.wire import spec

T = TypeVar("T")


def meta(
    owner: str = "", description: str = "", tags: list[str] | None = None, deleted: bool = False
) -> Callable[[T], T]:
    def mark(obj: T) -> T:
        target: Any = getattr(obj, "__func__", obj)
        target.__fennel_meta__ = spec.MetaSpec(
            owner=owner, description=description, tags=tuple(sorted(tags or ())), deleted=deleted
        )
        return obj

    return mark


def meta_of(obj: Any, default_description: str = "") -> spec.MetaSpec:
    target = getattr(obj, "__func__", obj)
    found: spec.MetaSpec | None = getattr(target, "__fennel_meta__", None)
    if found is None:
        return spec.MetaSpec(description=default_description)
    if not found.description and default_description:
        return spec.MetaSpec(found.owner, default_description, found.tags, found.deleted)
    return found
