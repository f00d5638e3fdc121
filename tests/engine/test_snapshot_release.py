"""A snapshot upload racing the delete of its job never outlives it (real S3 server).

The bank deletes a snapshot prefix's marker first and its objects after; an upload checks the
marker after its PUT. Whatever the interleaving, no object stays under a released prefix,
and an upload into a prefix re-created meanwhile (another incarnation) is withdrawn too.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fennel_dagster.commit.blueprint import Blueprint
from fennel_dagster.commit.physical.base import PhysicalAssets
from fennel_dagster.engine.snapshots import PrefixReleased, SnapshotStore
from fennel_dagster.settings import Settings
from fennel_dagster.wire import plan

pytestmark = pytest.mark.services

JOB = "pipeline.Spend.abc123"


def _prefix() -> Blueprint:
    return Blueprint(
        "snapshot_prefix", plan.snapshot_prefix(JOB), "h" * 64, "Spend",
        (("bucket_prefix", plan.snapshot_prefix(JOB)),),
    )  # fmt: skip


def _checkpoint(tmp_path: Path) -> Path:
    ck = tmp_path / "ck"
    ck.mkdir(parents=True)
    (ck / "CURRENT").write_text("MANIFEST-000001\n")
    return ck


def _objects(s: Settings) -> list[str]:
    return PhysicalAssets(s).stray_objects(set())


def test_an_upload_after_the_release_withdraws_itself(
    engine_settings: Settings, tmp_path: Path
) -> None:
    s, bp = engine_settings, _prefix()
    phys = PhysicalAssets(s)
    phys.create(bp)
    store = SnapshotStore(s)
    store.upload(JOB, 0, 5, _checkpoint(tmp_path))  # the runner's store knows its incarnation
    assert len(store.keys(JOB, 0)) == 1
    phys.destroy(bp)  # marker, then every object
    assert _objects(s) == []
    with pytest.raises(PrefixReleased, match="released during an upload"):
        store.upload(JOB, 0, 6, _checkpoint(tmp_path / "again"))  # lands after the listing
    assert _objects(s) == [], "a snapshot outlived its prefix"


def test_an_upload_into_a_re_created_prefix_is_withdrawn(
    engine_settings: Settings, tmp_path: Path
) -> None:
    s, bp = engine_settings, _prefix()
    phys = PhysicalAssets(s)
    phys.create(bp)
    old = SnapshotStore(s)
    old.upload(JOB, 0, 5, _checkpoint(tmp_path))
    phys.destroy(bp)
    phys.create(bp)  # committed again: same name, a new incarnation
    with pytest.raises(PrefixReleased):
        old.upload(JOB, 0, 6, _checkpoint(tmp_path / "again"))
    assert SnapshotStore(s).keys(JOB, 0) == [], "the new incarnation got the old one's state"
    fresh = SnapshotStore(s)
    fresh.upload(JOB, 0, 0, _checkpoint(tmp_path / "fresh"))  # its own runner uploads fine
    assert len(fresh.keys(JOB, 0)) == 1
