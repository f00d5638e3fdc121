"""``last`` (the greatest key of a range, in one seek) equals the last pair ``scan`` yields,
for every state reader: RocksDB's hangar, the mock's memory state and a pending overlay; and
an as-of lookup of a key with a long history reads one entry, not the history."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fennel_dagster.engine.hangar import Hangar
from fennel_dagster.ops.index import lookup_records, namespace
from fennel_dagster.ops.keys import entry_key
from fennel_dagster.ops.rows import dumps
from fennel_dagster.ops.state import MemoryState, OverlayReader, WriteBatch
from fennel_dagster.wire import spec

KEYS = st.binary(min_size=0, max_size=3)


def _scan_last(reader, start: bytes, end: bytes):  # type: ignore[no-untyped-def]
    found = None
    for item in reader.scan("ns", start, end):
        found = item
    return found


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    stored=st.dictionaries(KEYS, st.binary(max_size=2), max_size=30),
    pending=st.dictionaries(KEYS, st.none() | st.binary(max_size=2), max_size=8),
    ranges=st.lists(st.tuples(KEYS, KEYS), min_size=1, max_size=10),
)
def test_last_is_the_last_of_the_scan(tmp_path: Path, stored, pending, ranges) -> None:  # type: ignore[no-untyped-def]
    batch = WriteBatch()
    for k, v in stored.items():
        batch.put("ns", k, v)
    memory = MemoryState()
    memory.apply(batch)
    path = tmp_path / f"h{len(list(tmp_path.iterdir()))}"
    hangar = Hangar(path)
    try:
        hangar.apply(batch)
        overlay = OverlayReader(memory, WriteBatch.of({("ns", k): v for k, v in pending.items()}))
        for start, end in ranges:
            for reader in (memory, hangar, overlay):
                assert reader.last("ns", start, end) == _scan_last(reader, start, end), (
                    type(reader).__name__, start, end)  # fmt: skip
        assert hangar.last("absent", b"", b"\xff") is None
    finally:
        hangar.close()


class _Counting(MemoryState):
    entries = 0

    def scan(self, namespace, start, end=None):  # type: ignore[no-untyped-def]
        for item in super().scan(namespace, start, end):
            self.entries += 1
            yield item

    def last(self, namespace, start, end):  # type: ignore[no-untyped-def]
        self.entries += 1
        return super().last(namespace, start, end)


def test_an_as_of_lookup_of_a_long_history_reads_one_entry() -> None:
    ds = spec.DatasetSpec(
        name="Balance", version=1,
        fields=(spec.FieldSpec("uid", spec.IntType(), key=True),
                spec.FieldSpec("amount", spec.IntType()),
                spec.FieldSpec("ts", spec.TimestampType(), timestamp=True)),
    )  # fmt: skip
    state = _Counting()
    batch = WriteBatch()
    for i in range(1000):  # one key, a thousand versions
        batch.put(namespace(ds.name), entry_key((7,), i * 1000, 0), dumps({"uid": 7, "amount": i}))
    state.apply(batch)
    recs, found = lookup_records(state, ds, [{"uid": 7}, {"uid": 7}], [500_500, 10**9])
    assert found == [True, True] and [r["amount"] for r in recs] == [500, 999]
    assert state.entries == 2
