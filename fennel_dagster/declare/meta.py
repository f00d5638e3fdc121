"""``@meta(owner=, description=, tags=, deleted=)`` for datasets, featuresets and more."""

from __future__ import annotations

import sys
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


def module_owner(obj: Any) -> str:
    """Fennel's module-level default: ``__owner__ = "team@example.com"`` in the declaring
    module owns every dataset and featureset there without an ``@meta(owner=)``."""
    module = sys.modules.get(getattr(obj, "__module__", None) or "")
    owner = getattr(module, "__owner__", "") if module is not None else ""
    return owner if isinstance(owner, str) else ""


def meta_of(obj: Any, default_description: str = "") -> spec.MetaSpec:
    target = getattr(obj, "__func__", obj)
    found: spec.MetaSpec | None = getattr(target, "__fennel_meta__", None)
    if found is None:
        found = spec.MetaSpec()
    owner = found.owner or module_owner(target)
    description = found.description or default_description
    return spec.MetaSpec(owner, description, found.tags, found.deleted)
