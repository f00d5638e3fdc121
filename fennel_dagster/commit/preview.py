"""The diff a commit would apply to a branch: what it creates, reuses, keeps and releases."""

from __future__ import annotations

from collections.abc import Iterable

from fennel_dagster.commit.blueprint import Blueprint, BlueprintDiff, BlueprintSet


def diff(
    desired: BlueprintSet, current: Iterable[Blueprint], existing_hashes: Iterable[str]
) -> BlueprintDiff:
    """``current``: what the branch references now; ``existing_hashes``: assets alive anywhere."""
    cur = {b.hash: b for b in current}
    alive = set(existing_hashes)
    want = desired.by_hash()
    create, reuse, keep = [], [], []
    for h, b in sorted(want.items(), key=lambda kv: (kv[1].kind, kv[1].name)):
        if h in cur:
            keep.append(b)
        elif h in alive:
            reuse.append(b)
        else:
            create.append(b)
    release = [
        b for h, b in sorted(cur.items(), key=lambda kv: (kv[1].kind, kv[1].name)) if h not in want
    ]
    return BlueprintDiff(tuple(create), tuple(reuse), tuple(keep), tuple(release))


def render(d: BlueprintDiff) -> str:
    lines = []
    for label, items in (("create", d.create), ("reuse", d.reuse), ("release", d.release)):
        for b in items:
            lines.append(f"  {label:<8} {b.kind:<16} {b.name}  ({b.entity})")
    lines.append(
        f"  {len(d.create)} to create, {len(d.reuse)} to reuse, {len(d.keep)} unchanged, {len(d.release)} to release"
    )
    return "\n".join(lines)
