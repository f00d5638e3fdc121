"""``commit_spec``: everything a client sends for one commit, in canonical order."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fennel_dagster.declare.dataset import dataset_spec
from fennel_dagster.declare.featureset import featureset_spec
from fennel_dagster.wire import spec


def commit_spec(
    message: str,
    datasets: Iterable[Any] = (),
    featuresets: Iterable[Any] = (),
    env: str | None = None,
    incremental: bool = False,
) -> spec.CommitSpec:
    ds = sorted((dataset_spec(d) for d in datasets), key=lambda d: d.name)
    fs = sorted((featureset_spec(f) for f in featuresets), key=lambda f: f.name)
    return spec.CommitSpec(
        message=message, datasets=tuple(ds), featuresets=tuple(fs), env=env, incremental=incremental
    )
