"""A rewritten namespace (a window's tiles) is updated in place in RocksDB's memtable: what
is read back, by scans of the writer, after a reopen from the WAL, from a checkpoint and by a
secondary follower, equals the memory state's, whatever the sizes of the values overwritten;
and the memtable keeps one version of an entry overwritten batch after batch."""

from __future__ import annotations

import shutil
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fennel_dagster.engine.hangar import Hangar
from fennel_dagster.ops.state import MemoryState, WriteBatch, rewritten_in_place

TILES = "agg:s:n1:tiles"
KEYS = st.binary(min_size=1, max_size=2)
# batches of puts and deletes; values grow, shrink and stay the same size
BATCHES = st.lists(
    st.dictionaries(KEYS, st.none() | st.binary(max_size=24), min_size=1, max_size=12),
    min_size=1, max_size=8,
)  # fmt: skip


def _content(reader) -> list[tuple[bytes, bytes]]:  # type: ignore[no-untyped-def]
    return list(reader.scan(TILES, b""))


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(batches=BATCHES)
def test_in_place_updates_read_back_as_the_memory_state(tmp_path: Path, batches) -> None:  # type: ignore[no-untyped-def]
    assert rewritten_in_place(TILES) and not rewritten_in_place("agg:s:n1")
    root = tmp_path / f"r{len(list(tmp_path.iterdir()))}"
    memory, hangar = MemoryState(), Hangar(root / "db")
    try:
        for puts in batches:
            wb = WriteBatch()
            for k, v in puts.items():
                if v is None:
                    wb.delete(TILES, k)
                else:
                    wb.put(TILES, k, v)
            memory.apply(wb)
            hangar.apply(wb)
            assert _content(hangar) == _content(memory)
            for k in puts:
                assert hangar.get(TILES, k) == memory.get(TILES, k)
        follower = Hangar.open_secondary(root / "db", root / "follower")
        try:
            assert _content(follower) == _content(memory)
        finally:
            follower.close()
        hangar.checkpoint(root / "ck")
    finally:
        hangar.close()
    reopened = Hangar(root / "db")  # the memtable rebuilt from the WAL
    try:
        assert _content(reopened) == _content(memory)
    finally:
        reopened.close()
    restored = Hangar(root / "ck")
    try:
        assert _content(restored) == _content(memory)
    finally:
        restored.close()
    shutil.rmtree(root)


def test_the_memtable_keeps_one_version_of_a_tile_rewritten_every_batch(tmp_path: Path) -> None:
    hangar = Hangar(tmp_path / "db")
    try:
        for i in range(2000):
            wb = WriteBatch()
            wb.put(TILES, b"tile", i.to_bytes(8, "big"))  # same size: updated in place
            wb.put("agg:s:n1", i.to_bytes(8, "big"), b"event")  # appended, never rewritten
            hangar.apply(wb)
        tiles = hangar._family(TILES)
        events = hangar._family("agg:s:n1")
        entries = "rocksdb.num-entries-active-mem-table"
        assert int(events.property_value(entries)) == 2000
        assert int(tiles.property_value(entries)) == 1, "every version of the tile was kept"
        assert hangar.get(TILES, b"tile") == (1999).to_bytes(8, "big")
    finally:
        hangar.close()
