"""Declared datasets by name, so featuresets can resolve a looked-up field's keys."""

from __future__ import annotations

from fennel_dagster.declare.errors import DeclarationError
from fennel_dagster.wire import spec

_DATASETS: dict[str, spec.DatasetSpec] = {}


def register(ds: spec.DatasetSpec) -> None:
    _DATASETS[ds.name] = ds


def dataset_keys(name: str) -> tuple[str, ...]:
    ds = _DATASETS.get(name)
    if ds is None:
        raise DeclarationError(f"dataset {name} is not declared (declare it before featuresets)")
    if not ds.keys:
        raise DeclarationError(
            f"dataset {name} has no key fields, so its fields cannot be looked up: "
            "declare keys with field(key=True)"
        )
    return ds.keys
