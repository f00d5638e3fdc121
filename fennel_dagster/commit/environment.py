"""``commit(env=...)``: keep the sources, pipelines and extractors meant for that environment.

Fennel's rule: an entity with no ``env`` runs everywhere; ``env=["prod"]`` only where the
commit's env is ``prod``; ``env=["~dev"]`` everywhere but ``dev``. A commit without an env
keeps everything. The definition server and the mock client both select with this one
function before validating, so the same declarations give the same graph in both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from fennel_dagster.wire import spec


def selected(selectors: Sequence[str], env: str | None) -> bool:
    if env is None or not selectors:
        return True
    excluded = {s[1:] for s in selectors if s.startswith("~")}
    included = {s for s in selectors if not s.startswith("~")}
    if env in excluded:
        return False
    return not included or env in included


def select_env(commit: spec.CommitSpec) -> spec.CommitSpec:
    env = commit.env
    if env is None:
        return commit
    datasets = tuple(
        replace(
            ds,
            sources=tuple(s for s in ds.sources if selected(s.env, env)),
            sinks=tuple(s for s in ds.sinks if selected(s.env, env)),
            pipelines=tuple(p for p in ds.pipelines if selected(p.env, env)),
        )
        for ds in commit.datasets
    )
    featuresets = tuple(
        replace(fs, extractors=tuple(e for e in fs.extractors if selected(e.env, env)))
        for fs in commit.featuresets
    )
    return replace(commit, datasets=datasets, featuresets=featuresets)
