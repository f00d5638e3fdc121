"""The hangar's range scan (RocksDB stops at the upper bound) yields exactly what the memory
state's does, for ranges of every shape: empty, inverted, open-ended, past every key."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fennel_dagster.engine.hangar import Hangar
from fennel_dagster.ops.state import MemoryState, WriteBatch

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
    batch = WriteBatch()
    for k, v in stored.items():
        batch.put("ns", k, v)
    memory = MemoryState()
    memory.apply(batch)
    hangar = Hangar(tmp_path / f"h{len(list(tmp_path.iterdir()))}")
    try:
        hangar.apply(batch)
        for start, end in ranges:
            want = list(memory.scan("ns", start, end))
            assert list(hangar.scan("ns", start, end)) == want, (start, end)
            assert all(type(k) is bytes and type(v) is bytes for k, v in want)
        assert list(hangar.scan("absent", b"", b"\xff")) == []
    finally:
        hangar.close()
