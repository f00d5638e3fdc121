"""The state interface: overlays see pending writes, scans are ordered and bounded."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from fennel_dagster.ops.keys import entry_key, key_prefix, prefix_end, split_entry
from fennel_dagster.ops.state import MemoryState, OverlayReader, WriteBatch


def test_overlay_reads_pending_puts_and_deletes_before_the_store() -> None:
    store = MemoryState()
    base = WriteBatch()
    base.put("ns", b"a", b"1")
    base.put("ns", b"b", b"2")
    store.apply(base)
    pending = WriteBatch()
    pending.put("ns", b"c", b"3")
    pending.delete("ns", b"a")
    view = OverlayReader(store, pending)
    assert view.get("ns", b"a") is None and view.get("ns", b"c") == b"3"
    assert list(view.scan("ns", b"")) == [(b"b", b"2"), (b"c", b"3")]
    assert store.get("ns", b"a") == b"1"  # nothing reaches the store before apply


@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.integers(-(10**12), 10**12), st.integers(0, 5)), max_size=40
    )
)
def test_entry_keys_scan_per_key_in_event_time_order(entries: list[tuple[int, int, int]]) -> None:
    store = MemoryState()
    wb = WriteBatch()
    for k, ts, seq in entries:
        wb.put("ns", entry_key((k, "x"), ts, seq), b"")
    store.apply(wb)
    for k in range(4):
        prefix = key_prefix((k, "x"))
        got = [split_entry(key) for key, _ in store.scan("ns", prefix, prefix_end(prefix))]
        assert got == sorted({(ts, seq) for kk, ts, seq in entries if kk == k})
