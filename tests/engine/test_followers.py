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
