"""Incremental snapshots: a snapshot stores only the SST files not stored yet, and restores
byte for byte — on the real S3 server and in the embedded (directory) mode alike.

Each test drives a real RocksDB hangar: write, checkpoint, upload, write more, and so on,
and holds the restored state to what was written.
"""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from fennel_dagster.engine import snapshots
from fennel_dagster.engine.hangar import Hangar
from fennel_dagster.engine.snapshots import SnapshotStore, SnapshotUnreadable
from fennel_dagster.engine.snapshotting import Snapshotter
from fennel_dagster.ops.state import WriteBatch
from fennel_dagster.settings import Settings

JOB = "pipeline.Spend.abc123"
NS = "tiles"


@pytest.fixture(params=["dir", pytest.param("s3", marks=pytest.mark.services)])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Settings]:
    if request.param == "dir":
        yield Settings(home=tmp_path / "home", s3_embedded=True, namespace="t")
    else:
        yield request.getfixturevalue("engine_settings")


class State:
    """A hangar and what it should hold."""

    def __init__(self, path: Path) -> None:
        self.hangar = Hangar(path)
        self.expected: dict[bytes, bytes] = {}
        self.marker = 0

    def write(self, start: int, n: int) -> None:
        rows = {
            (NS, b"k%08d" % i): b"v%d-%d" % (i, self.marker) * 8 for i in range(start, start + n)
        }
        self.marker += 1
        self.hangar.apply(WriteBatch.of(rows), {("in", 0): self.marker}, self.marker)
        self.expected.update({k: v for (_, k), v in rows.items()})

    def checkpoint(self, at: Path) -> Path:
        return self.hangar.checkpoint(at / f"ck{self.marker}")


def _held(path: Path) -> dict[bytes, bytes]:
    with Hangar(path) as h:
        return dict(h.scan(NS, b"", b"\xff"))


def _stored_files(store: SnapshotStore) -> list[str]:
    return [o.key for o in store.objects.list(store.prefix(JOB, 0) + "sst/")]


def test_a_second_snapshot_stores_only_the_new_files(where: Settings, tmp_path: Path) -> None:
    state, store = State(tmp_path / "db"), SnapshotStore(where)
    state.write(0, 5_000)
    ck1 = state.checkpoint(tmp_path)
    store.upload(JOB, 0, state.marker, ck1)
    first = set(_stored_files(store))
    assert len(first) == len(_ssts(ck1)) > 0
    state.write(5_000, 100)
    ck2 = state.checkpoint(tmp_path)
    store.upload(JOB, 0, state.marker, ck2)
    second = set(_stored_files(store))
    assert first < second, "a file of the first snapshot went"
    assert len(second - first) == len(_ssts(ck2) - _ssts(ck1)), "old files were stored again"
    restored = tmp_path / "restored"
    key = SnapshotStore(where).restore_latest(JOB, 0, restored)
    assert key == store.keys(JOB, 0)[-1]
    state.hangar.close()
    assert _held(restored) == state.expected
    with Hangar(restored) as h:
        assert h.marker() == 2 and h.offsets() == {("in", 0): 2}


def test_a_restored_store_goes_on_incrementally_and_prunes_what_nothing_names(
    where: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state, first = State(tmp_path / "a"), SnapshotStore(where)
    for i in range(3):
        state.write(i * 1_000, 1_000)
        first.upload(JOB, 0, state.marker, state.checkpoint(tmp_path))
    state.hangar.close()
    # a new runner restores, then compacts: every file it holds is new
    second = SnapshotStore(where)
    second.restore_latest(JOB, 0, tmp_path / "b")
    restored = State(tmp_path / "b")
    restored.expected, restored.marker = dict(state.expected), state.marker
    before = set(_stored_files(second))
    held = _ssts(tmp_path / "b")
    restored.write(3_000, 10)
    ck = restored.checkpoint(tmp_path)
    second.upload(JOB, 0, restored.marker, ck)
    added = set(_stored_files(second)) - before
    assert len(added) == len(_ssts(ck) - held) > 0, "restored files were stored again"
    restored.hangar._db.compact_range(None, None)  # the old files die
    for fam in restored.hangar._families.values():
        fam.compact_range(None, None)
    restored.write(4_000, 10)
    second.upload(JOB, 0, restored.marker, restored.checkpoint(tmp_path))
    monkeypatch.setattr(snapshots, "ORPHAN_GRACE_S", 0.0)
    assert second.prune(JOB, 0, keep=1) == 4
    named = json.loads(_manifest(second, second.keys(JOB, 0)[-1]))["files"]
    assert sorted(_stored_files(second)) == sorted(
        second.prefix(JOB, 0) + f["key"] for f in named.values()
    ), "files no kept snapshot names outlived the prune"
    restored.hangar.close()
    assert _held_after_restore(where, tmp_path / "c") == restored.expected


def test_young_unreferenced_files_survive_a_prune(where: Settings, tmp_path: Path) -> None:
    """An upload in flight (another runner's) has stored files its snapshot does not name
    yet: a prune must leave them."""
    state, store = State(tmp_path / "db"), SnapshotStore(where)
    state.write(0, 1_000)
    store.upload(JOB, 0, state.marker, state.checkpoint(tmp_path))
    flight = tmp_path / "flight.sst"
    flight.write_bytes(b"in flight")
    store.objects.put_file(store.prefix(JOB, 0) + "sst/othersession-000099.sst", flight)
    store.prune(JOB, 0, keep=1)
    assert any(k.endswith("othersession-000099.sst") for k in _stored_files(store))
    state.hangar.close()


def test_files_of_the_same_name_from_another_runner_never_overwrite_each_other(
    where: Settings, tmp_path: Path
) -> None:
    """RocksDB numbers files alike in two databases (and may number one again after a
    crash): a kept snapshot must not lose its file to another runner's of the same name."""
    kept, other = State(tmp_path / "kept"), State(tmp_path / "other")
    kept.write(0, 1_000)
    other.write(0, 1_000)
    other.write(1_000, 10)  # a different state, with files named as the kept one's
    ck_kept, ck_other = kept.checkpoint(tmp_path / "k"), other.checkpoint(tmp_path / "o")
    assert _ssts(ck_kept) & _ssts(ck_other), "no file name in common: the test shows nothing"
    SnapshotStore(where).upload(JOB, 0, 5, ck_kept)
    SnapshotStore(where).upload(JOB, 0, 0, ck_other)  # older: the kept one stays the newest
    kept.hangar.close()
    other.hangar.close()
    assert _held_after_restore(where, tmp_path / "r") == kept.expected


def test_a_snapshot_with_a_missing_file_gives_way_to_the_one_before(
    where: Settings, tmp_path: Path
) -> None:
    state, store = State(tmp_path / "db"), SnapshotStore(where)
    state.write(0, 1_000)
    store.upload(JOB, 0, state.marker, state.checkpoint(tmp_path))
    early = dict(state.expected)
    state.write(1_000, 1_000)
    newest = store.upload(JOB, 0, state.marker, state.checkpoint(tmp_path)).key
    state.hangar.close()
    files = json.loads(_manifest(store, newest))["files"].values()
    added = {store.prefix(JOB, 0) + f["key"] for f in files} - set(_named(store, 0))
    store.objects.delete(sorted(added))
    key = SnapshotStore(where).restore_latest(JOB, 0, tmp_path / "r")
    assert key == store.keys(JOB, 0)[0]
    assert _held(tmp_path / "r") == early
    store.objects.delete(_stored_files(store))
    with pytest.raises(SnapshotUnreadable, match=r"p0: none of its 2 snapshots"):
        SnapshotStore(where).restore_latest(JOB, 0, tmp_path / "r2")


def test_a_full_snapshot_of_the_earlier_format_is_restored(where: Settings, tmp_path: Path) -> None:
    state, store = State(tmp_path / "db"), SnapshotStore(where)
    state.write(0, 1_000)
    ck = state.checkpoint(tmp_path)
    state.hangar.close()
    archive = tmp_path / "full.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(ck, arcname="state")
    key = f"{store.prefix(JOB, 0)}{state.marker + 1:020d}-0123abcd.tar"
    store.objects.put_file(key, archive)
    assert SnapshotStore(where).restore_latest(JOB, 0, tmp_path / "r") == key
    assert _held(tmp_path / "r") == state.expected


def _ssts(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir() if p.suffix == ".sst"}


def _held_after_restore(where: Settings, dest: Path) -> dict[bytes, bytes]:
    SnapshotStore(where).restore_latest(JOB, 0, dest)
    return _held(dest)


def _manifest(store: SnapshotStore, key: str) -> bytes:
    with tarfile.open(fileobj=_bytes(store, key)) as tar:
        member = tar.extractfile("files.json")
        assert member is not None
        return member.read()


def _named(store: SnapshotStore, index: int) -> list[str]:
    files = json.loads(_manifest(store, store.keys(JOB, 0)[index]))["files"].values()
    return [store.prefix(JOB, 0) + f["key"] for f in files]


def _bytes(store: SnapshotStore, key: str) -> io.BytesIO:
    raw = store.objects.get_bytes(key)
    assert raw is not None
    return io.BytesIO(raw)


def test_a_runners_snapshotter_reports_what_each_snapshot_stored(tmp_path: Path) -> None:
    """What the engine exports as ``fennel_engine_snapshot_bytes``: a small change after a
    big state stores a small snapshot."""
    where = Settings(home=tmp_path / "home", s3_embedded=True, namespace="t")
    state, seen = State(tmp_path / "db"), []
    snapshotter = Snapshotter(SnapshotStore(where), JOB, 0, tmp_path / "db", 3600.0, 3,
                              on_uploaded=lambda uploaded, seconds: seen.append(uploaded))  # fmt: skip
    state.write(0, 200_000)
    snapshotter.now(state.hangar)
    state.write(200_000, 10)
    snapshotter.now(state.hangar)
    state.hangar.close()
    first, second = seen
    assert first.reused_files == 0 and second.reused_files > 0
    assert second.stored_bytes * 10 < first.stored_bytes, (first, second)


def test_a_failed_upload_does_not_make_the_next_one_store_everything(
    where: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An S3 outage fails a snapshot; the one after it stores only what is new."""
    state, store = State(tmp_path / "db"), SnapshotStore(where)
    state.write(0, 5_000)
    store.upload(JOB, 0, state.marker, state.checkpoint(tmp_path))
    state.write(5_000, 10)
    put = store.objects.put_file

    def refused(key: str, source: Path) -> None:
        raise ConnectionError(f"S3 is down ({key})")

    monkeypatch.setattr(store.objects, "put_file", refused)
    with pytest.raises(ConnectionError):
        store.upload(JOB, 0, state.marker, state.checkpoint(tmp_path))
    monkeypatch.setattr(store.objects, "put_file", put)
    state.write(5_010, 10)
    after = store.upload(JOB, 0, state.marker, state.checkpoint(tmp_path))
    state.hangar.close()
    assert after.reused_files > 0, after
    assert _held_after_restore(where, tmp_path / "r") == state.expected
