"""A lookup endpoint's follower of a live hangar sees every write of its primary at the next
read, across memtable flushes and WAL rotations: the cheap fingerprint must not go stale, and
the write just before a flush must not stay hidden (RocksDB's catch-up alone hid it: this
test failed on write 39 before ``Hangar.catch_up`` reopened after a flush)."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from fennel_dagster.engine import hangar as hangar_module
from fennel_dagster.engine.hangar import Hangar
from fennel_dagster.engine.lookup_server import Followers
from fennel_dagster.engine.rocks_tuning import RocksTuning
from fennel_dagster.ops.state import WriteBatch


def test_a_follower_reads_each_write_of_its_primary_at_once(tmp_path: Path) -> None:
    primary = Hangar(tmp_path / "primary")
    job = SimpleNamespace(hash="f" * 64, name="job")
    followers = Followers(lambda j, p: tmp_path / "primary")
    try:
        for i in range(400):
            batch = WriteBatch()
            batch.put("ns", b"key", str(i).encode())
            primary.apply(batch, offsets={("topic", 0): i + 1})
            if i % 40 == 39:  # a flush: new SST, MANIFEST and WAL files
                primary._families["ns"].flush()
            seen = followers.read(job, 0, lambda h: h.get("ns", b"key"))  # type: ignore[arg-type]
            assert seen == str(i).encode(), f"write {i} not seen (saw {seen!r})"
    finally:
        followers.drop(set())
        primary.close()


def test_a_partition_whose_state_left_mid_read_is_in_motion_not_an_error(tmp_path: Path) -> None:
    """A partition handed to another engine loses its state directory here while a lookup
    may still be routed to it: the read says the partition moved (the caller retries and
    finds the new owner, HTTP 409), not a FileNotFoundError as a failed lookup; and a
    partition that comes back is read afresh."""
    import shutil

    from fennel_dagster.engine.lookup_server import StateMoved

    path = tmp_path / "primary"
    primary = Hangar(path)
    job = SimpleNamespace(hash="f" * 64, name="job")
    followers = Followers(lambda j, p: path)
    batch = WriteBatch()
    batch.put("ns", b"key", b"1")
    primary.apply(batch, offsets={("topic", 0): 1})
    try:
        assert followers.read(job, 0, lambda h: h.get("ns", b"key")) == b"1"  # type: ignore[arg-type]
        primary.close()
        shutil.rmtree(path)
        with pytest.raises(StateMoved, match="partition 0 of job left this engine"):
            followers.read(job, 0, lambda h: h.get("ns", b"key"))  # type: ignore[arg-type]
        primary = Hangar(path)  # the partition is back here, with new state
        batch = WriteBatch()
        batch.put("ns", b"key", b"2")
        primary.apply(batch, offsets={("topic", 0): 2})
        assert followers.read(job, 0, lambda h: h.get("ns", b"key")) == b"2"  # type: ignore[arg-type]
    finally:
        followers.drop(set())
        primary.close()


def test_a_follower_rides_full_memtable_flushes_without_replaying_a_memtable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reopening replays every live WAL while holding the GIL: after a full memtable's flush
    the old WAL (a whole memtable, kept live by other families' writes) took a follower 5 s
    to reopen under load. While the WALs are big it catches up as RocksDB does, which hides
    nothing when the flush followed a write; it reopens once they are small again."""
    monkeypatch.setattr(hangar_module, "REOPEN_WAL_MAX", 64 * 1024)
    primary = Hangar(tmp_path / "primary", tuning=RocksTuning(write_buffer_mb=1))
    job = SimpleNamespace(hash="f" * 64, name="job")
    followers = Followers(lambda j, p: tmp_path / "primary")
    opened = 0
    real_open = Hangar._open
    wals: set[str] = set()

    def counting_open(self: Hangar) -> None:
        nonlocal opened
        opened += self.secondary is not None
        real_open(self)

    monkeypatch.setattr(Hangar, "_open", counting_open)
    try:
        for i in range(300):  # ~30 KB a write: a 1 MB memtable fills every ~35 writes
            batch = WriteBatch()
            batch.put("ns", b"key", str(i).encode())
            batch.space("bulk").update({f"{i}:{j}".encode(): b"v" * 300 for j in range(100)})
            primary.apply(batch, offsets={("topic", 0): i + 1})
            seen = followers.read(job, 0, lambda h: h.get("ns", b"key"))  # type: ignore[arg-type]
            assert seen == str(i).encode(), f"write {i} not seen (saw {seen!r})"
            wals |= {p.name for p in (tmp_path / "primary").glob("*.log")}
        assert len(wals) >= 4, wals  # full memtables did flush: their WALs rotated
        assert opened == 1, f"the follower reopened {opened - 1} times"  # its first open only
        primary.flush_in_background()  # every family: the big WALs go
        deadline = time.monotonic() + 10
        while sum(p.stat().st_size for p in (tmp_path / "primary").glob("*.log")) > 64 * 1024:
            assert time.monotonic() < deadline, "the primary's flush did not end"
            time.sleep(0.05)
        batch = WriteBatch()
        batch.put("ns", b"key", b"300")
        primary.apply(batch, offsets={("topic", 0): 301})
        assert followers.read(job, 0, lambda h: h.get("ns", b"key")) == b"300"  # type: ignore[arg-type]
        assert opened == 2  # and now, with small WALs, it reopened
    finally:
        followers.drop(set())
        primary.close()
