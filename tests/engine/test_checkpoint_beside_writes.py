"""A snapshot's RocksDB checkpoint is taken in a background thread while the runner's loop
goes on writing batches, so it must still hold whole batches: a prefix of them, with the
offsets and replaylog marker of the newest. Every batch is one atomic write across column
families (the way ``Checkpoint.apply`` writes one); the checkpoints are taken beside such
writes on a real RocksDB, opened, and held to the marker they carry."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from fennel_dagster.engine import snapshotting
from fennel_dagster.engine.hangar import Hangar
from fennel_dagster.engine.snapshotting import Snapshotter
from fennel_dagster.ops.state import WriteBatch

FAMILIES = ("agg:events", "agg:tiles", "agg:newest")
LATE = "agg:late"  # a family created while checkpoints are being taken
LATE_FROM = 80
BATCHES = 200
ROWS = 200  # a batch's rows per family


def _batch(b: int) -> WriteBatch:
    """Batch ``b``: new keys in every family, and ``last`` overwritten with ``b``."""
    fams = FAMILIES + ((LATE,) if b >= LATE_FROM else ())
    rows: dict[tuple[str, bytes], bytes | None] = {}
    for fam in fams:
        rows.update({(fam, b"k%06d-%04d" % (b, i)): b"%d" % b * 20 for i in range(ROWS)})
        rows[(fam, b"last")] = b"%d" % b
    return WriteBatch.of(rows)


def _check(path: Path) -> int:
    """The marker the checkpoint at ``path`` holds, after holding every family to it."""
    with Hangar(path) as h:
        marker = h.marker()
        assert marker is not None
        assert h.offsets() == {("in", 0): marker + 1}
        for fam in FAMILIES + (LATE,):
            first = LATE_FROM if fam == LATE else 1
            if marker < first:
                assert h.get(fam, b"last") is None
                continue
            assert h.get(fam, b"last") == b"%d" % marker, fam
            keys = [k for k, _ in h.scan(fam, b"k", b"l")]
            assert len(keys) == (marker - first + 1) * ROWS, fam
            assert keys[-1] == b"k%06d-%04d" % (marker, ROWS - 1), fam
    return marker


def test_checkpoints_taken_beside_batches_hold_a_prefix_of_whole_batches(
    tmp_path: Path,
) -> None:
    hangar = Hangar(tmp_path / "state")
    hangar.apply(_batch(1), {("in", 0): 2}, 1)
    written = threading.Event()
    taken: list[Path] = []

    def checkpoints() -> None:
        while not written.is_set():
            taken.append(hangar.checkpoint(tmp_path / f"ck{len(taken)}"))

    thread = threading.Thread(target=checkpoints)
    thread.start()
    try:
        for b in range(2, BATCHES + 1):
            hangar.apply(_batch(b), {("in", 0): b + 1}, b)
    finally:
        written.set()
        thread.join()
    hangar.close()

    markers = [_check(path) for path in taken]
    assert markers == sorted(markers)
    # taken beside the writes, not only before or after them
    assert len(taken) >= 3 and len({m for m in markers if 1 < m < BATCHES}) >= 2, markers


class _Gated(Hangar):
    """A hangar whose checkpoint waits for ``gate``: the loop must not."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.gate = threading.Event()

    def checkpoint(self, dest: Path) -> Path:
        assert self.gate.wait(30)
        return super().checkpoint(dest)


class _Stored:
    def __init__(self) -> None:
        self.markers: list[int | None] = []

    def upload(self, job: str, partition: int, marker: int | None, checkpoint: Path) -> str:
        with Hangar(checkpoint) as h:
            assert h.marker() is not None and (marker is None or h.marker() >= marker)
        self.markers.append(marker)
        return "key"

    def prune(self, job: str, partition: int, keep: int) -> None:
        pass


def _due(hangar: Hangar, store: _Stored, monkeypatch: pytest.MonkeyPatch) -> Snapshotter:
    """A snapshotter of ``hangar`` (holding one batch) whose next tick takes a snapshot."""
    monkeypatch.setattr(snapshotting, "FLUSH_LEAD_S", 0.0)
    hangar.apply(_batch(1), {("in", 0): 2}, 1)
    snap = Snapshotter(store, "job", 0, hangar.path, 0.0, 2)  # type: ignore[arg-type]
    snap.dirty = True
    return snap


def _closing(snap: Snapshotter, hangar: Hangar) -> threading.Thread:
    """The runner's way out, in a thread: settle the snapshotter, then close the hangar."""
    thread = threading.Thread(target=lambda: (snap.settle(), hangar.close()), daemon=True)
    thread.start()
    return thread


def test_the_loop_goes_on_while_the_checkpoint_is_taken_and_closes_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hangar = _Gated(tmp_path / "state")
    store = _Stored()
    snap = _due(hangar, store, monkeypatch)
    snap.tick(hangar)  # due: returns with the checkpoint still waiting on the gate
    hangar.apply(_batch(2), {("in", 0): 3}, 2)  # the loop writes meanwhile
    closing = _closing(snap, hangar)
    closing.join(0.2)
    assert closing.is_alive(), "the hangar must not close under a checkpoint being taken"
    hangar.gate.set()
    closing.join(30)
    snap.join()
    assert not closing.is_alive() and store.markers == [1]


def test_a_snapshot_thread_that_cannot_start_leaves_nothing_to_settle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hangar = Hangar(tmp_path / "state")
    snap = _due(hangar, _Stored(), monkeypatch)

    def refuse(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    with pytest.raises(RuntimeError):
        snap.tick(hangar)
    monkeypatch.undo()
    closing = _closing(snap, hangar)
    closing.join(30)
    assert not closing.is_alive(), "settle waited for a checkpoint no thread takes"
