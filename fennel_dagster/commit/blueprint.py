"""Blueprints: the logical description of the physical assets a commit needs.

The definition server compiles a validated entity graph into a ``BlueprintSet``; the asset
bank (``commit.bank``) turns blueprints into real things (Kafka topics, S3 prefixes, job
registry rows) and ref-counts them per branch. A blueprint's ``hash`` is the canonical content
hash of what it *is* (not of which branch declared it), so an isomorphic asset declared in two
branches is one physical asset; its ``name`` is derived from that hash.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

AssetKind = Literal["topic", "job", "snapshot_prefix", "offline_table", "index"]


@dataclass(frozen=True)
class Blueprint:
    kind: AssetKind
    name: str  # physical name: topic name, job name, S3 prefix, table name
    hash: str  # hex sha256 of the canonical spec; identity in the asset bank
    entity: str  # the declaring entity, e.g. "UserSpend" or "UserSpend.agg" (not hashed)
    spec: tuple[tuple[str, Any], ...] = field(default=())
    """Everything the creator needs, as sorted (key, JSON value) pairs: a topic's
    ``partitions`` and ``configs``; a job's ``job_kind``, ``partitions``, ``inputs``,
    ``outputs``, ``replaylog``, ``state`` and the IR it runs (as wire JSON); a prefix's
    ``bucket_prefix``."""

    def spec_dict(self) -> dict[str, Any]:
        return dict(self.spec)

    def spec_json(self) -> str:
        return json.dumps(dict(self.spec), sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class BlueprintSet:
    """All blueprints of one branch's graph, keyed by hash (sorted for determinism)."""

    blueprints: tuple[Blueprint, ...]

    def by_hash(self) -> dict[str, Blueprint]:
        return {b.hash: b for b in self.blueprints}

    def of_kind(self, kind: AssetKind) -> tuple[Blueprint, ...]:
        return tuple(b for b in self.blueprints if b.kind == kind)


@dataclass(frozen=True)
class BlueprintDiff:
    """What a commit would do to a branch: the preview."""

    create: tuple[Blueprint, ...]  # no instance exists anywhere
    reuse: tuple[Blueprint, ...]  # exists (maybe via another branch): +1 reference
    keep: tuple[Blueprint, ...]  # the branch already references it: unchanged
    release: tuple[Blueprint, ...]  # the branch drops its reference (destroyed at zero)
