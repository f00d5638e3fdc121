"""A lookup endpoint's follower of a live hangar sees every write of its primary at the next
read, across memtable flushes and WAL rotations: the cheap fingerprint must not go stale, and
the write just before a flush must not stay hidden (RocksDB's catch-up alone hid it: this
test failed on write 39 before ``Hangar.catch_up`` reopened after a flush)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from fennel_dagster.engine.hangar import Hangar
from fennel_dagster.engine.lookup_server import Followers
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

    import pytest

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
