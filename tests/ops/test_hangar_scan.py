"""The hangar's range scan (RocksDB stops at the upper bound) yields exactly what the memory
state's does, for ranges of every shape: empty, inverted, open-ended, past every key; and a
batch of ranges read with one iterator (``scan_ranges``) is a scan per range."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fennel_dagster.engine.hangar import Hangar
from fennel_dagster.ops.state import MemoryState, OverlayReader, WriteBatch

KEYS = st.binary(min_size=0, max_size=3)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    stored=st.dictionaries(KEYS, st.binary(max_size=2), max_size=30),
    ranges=st.lists(st.tuples(KEYS, st.none() | KEYS), min_size=1, max_size=10),
)
def test_a_scan_of_the_hangar_equals_the_memory_states(  # type: ignore[no-untyped-def]
    tmp_path: Path, stored, ranges
) -> None:
    memory, hangar = _stores(tmp_path, stored)
    try:
        for start, end in ranges:
            want = list(memory.scan("ns", start, end))
            assert list(hangar.scan("ns", start, end)) == want, (start, end)
            assert all(type(k) is bytes and type(v) is bytes for k, v in want)
        assert list(hangar.scan("absent", b"", b"\xff")) == []
    finally:
        hangar.close()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    stored=st.dictionaries(KEYS, st.binary(max_size=2), max_size=30),
    pending=st.dictionaries(KEYS, st.none() | st.binary(max_size=2), max_size=8),
    ranges=st.lists(st.tuples(KEYS, KEYS), max_size=12),
)
def test_scan_ranges_is_a_scan_per_range(tmp_path: Path, stored, pending, ranges) -> None:  # type: ignore[no-untyped-def]
    """One RocksDB iterator sought range after range gives what a scan per range gives,
    empty and inverted ranges included, through an overlay of pending writes too."""
    memory, hangar = _stores(tmp_path, stored)
    try:
        for base in (memory, hangar):
            overlay = OverlayReader(base, WriteBatch.of({("ns", k): v for k, v in pending.items()}))
            for reader in (base, overlay):
                items: list[tuple[bytes, bytes]] = []
                counts = []
                for start, end in ranges:
                    got = list(reader.scan("ns", start, end))
                    items += got
                    counts.append(len(got))
                assert reader.scan_ranges("ns", ranges) == (items, counts), type(reader).__name__
        assert hangar.scan_ranges("absent", ranges) == ([], [0] * len(ranges))
    finally:
        hangar.close()


def _stores(tmp_path: Path, stored: dict[bytes, bytes]) -> tuple[MemoryState, Hangar]:
    """``stored`` in a memory state and in a new hangar (the caller closes it)."""
    batch = WriteBatch()
    for k, v in stored.items():
        batch.put("ns", k, v)
    memory = MemoryState()
    memory.apply(batch)
    hangar = Hangar(tmp_path / f"h{len(list(tmp_path.iterdir()))}")
    hangar.apply(batch)
    return memory, hangar
