"""A due snapshot asks RocksDB to flush in the background first and takes its checkpoint a
lead later, so the runner's loop does not wait on a memtable flush; a requested one is
taken at once. The hangar is a real RocksDB; the store only records what it was given."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from fennel_dagster.engine import snapshotting
from fennel_dagster.engine.hangar import Hangar
from fennel_dagster.engine.snapshotting import Snapshotter
from fennel_dagster.ops.state import WriteBatch


class Recorded:
    def __init__(self) -> None:
        self.uploads: list[tuple[int | None, list[str]]] = []

    def upload(self, job: str, partition: int, marker: int | None, checkpoint: Path) -> str:
        self.uploads.append((marker, sorted(p.name for p in checkpoint.iterdir())))
        return "key"

    def prune(self, job: str, partition: int, keep: int) -> None:
        pass


def _memtable_bytes(hangar: Hangar) -> int:
    fam: Any = hangar._family("agg:ns")
    return int(fam.property_int_value("rocksdb.cur-size-all-mem-tables") or 0)


def test_a_due_snapshot_flushes_in_the_background_before_its_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(snapshotting, "FLUSH_LEAD_S", 0.3)
    hangar = Hangar(tmp_path / "state")
    hangar.apply(WriteBatch.of({("agg:ns", f"k{i:05}".encode()): b"v" * 100 for i in range(5000)}))
    store = Recorded()
    snap = Snapshotter(store, "job", 0, tmp_path / "state", 0.0, 2)  # type: ignore[arg-type]
    snap.dirty = True
    full = _memtable_bytes(hangar)

    snap.tick(hangar)  # due: the flush is asked for, the checkpoint waits for the lead
    snap.join()
    assert store.uploads == []
    deadline = time.monotonic() + 10
    while _memtable_bytes(hangar) >= full and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _memtable_bytes(hangar) < full  # RocksDB flushed it in its own threads

    time.sleep(0.3)
    snap.tick(hangar)
    snap.join()
    assert len(store.uploads) == 1 and any(n.endswith(".sst") for n in store.uploads[0][1])


def test_a_requested_snapshot_is_taken_at_once(tmp_path: Path) -> None:
    hangar = Hangar(tmp_path / "state")
    hangar.apply(WriteBatch.of({("agg:ns", b"k"): b"v"}))
    store = Recorded()
    snap = Snapshotter(store, "job", 0, tmp_path / "state", 3600.0, 2)  # type: ignore[arg-type]
    snap.request()
    snap.tick(hangar)
    assert snap.done.is_set() and len(store.uploads) == 1
