"""The state interface stateful operators see (seed 003's "Hangar").

Operators never talk to RocksDB directly: they read through a ``StateReader`` and return
their mutations as a ``WriteBatch``. The engine applies the batch to its RocksDB-backed hangar
only after the Kafka transaction that carried the batch's outputs has committed; the mock
client applies it to ``MemoryState`` at once. Both run the same operator code.

Keys and values are bytes; each operator owns a namespace (its column family in RocksDB),
named after the job and operator node id.
"""

from __future__ import annotations

import bisect
from collections.abc import Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

# A namespace whose entries its operator overwrites batch after batch (a window's tiles)
# ends so; its store may then update an entry where it lies in memory.
REWRITTEN_SUFFIX = ":tiles"


def rewritten_in_place(namespace: str) -> bool:
    """Whether ``namespace``'s entries are overwritten over and over and never read backwards
    (no ``last``): RocksDB may then update them in place in its memtable, which would
    otherwise hold every version and make each seek skip them all."""
    return namespace.endswith(REWRITTEN_SUFFIX)


class StateReader(Protocol):
    def get(self, namespace: str, key: bytes) -> bytes | None: ...

    def multi_get(self, namespace: str, keys: list[bytes]) -> list[bytes | None]: ...

    def scan(
        self, namespace: str, start: bytes, end: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        """Key-ordered pairs with ``start <= key < end`` (``end=None``: to the namespace's end)."""
        ...

    def last(self, namespace: str, start: bytes, end: bytes) -> tuple[bytes, bytes] | None:
        """The pair with the greatest key in ``[start, end)``, found with one seek (an as-of
        read of a key with a long history must not walk it)."""
        ...

    def scan_ranges(
        self, namespace: str, bounds: Sequence[tuple[bytes, bytes]]
    ) -> tuple[list[tuple[bytes, bytes]], list[int]]:
        """The pairs of each ``[start, end)`` of ``bounds``, one range after another, and how
        many each range gave: a batch's thousands of short scans, which RocksDB serves from
        one iterator (making one per scan cost more than reading the range)."""
        ...


def scan_each(
    reader: StateReader, namespace: str, bounds: Sequence[tuple[bytes, bytes]]
) -> tuple[list[tuple[bytes, bytes]], list[int]]:
    """``scan_ranges`` as one ``scan`` per range (stores whose scans cost little to start)."""
    items: list[tuple[bytes, bytes]] = []
    counts: list[int] = []
    for start, end in bounds:
        before = len(items)
        items += reader.scan(namespace, start, end)
        counts.append(len(items) - before)
    return items, counts


@dataclass
class WriteBatch:
    """Mutations produced by one iteration, applied atomically (with offsets, in the engine):
    per namespace, each key's new value (None: deleted). Later writes to the same key win.

    Kept by namespace so a store applies and an overlay reads one namespace's writes without
    looking at the others', and an operator adds a batch's keys with one ``dict.update``."""

    spaces: dict[str, dict[bytes, bytes | None]] = field(default_factory=dict)

    @classmethod
    def of(cls, puts: Mapping[tuple[str, bytes], bytes | None]) -> WriteBatch:
        """A batch of ``{(namespace, key): value}``."""
        out = cls()
        for (ns, key), value in puts.items():
            out.space(ns)[key] = value
        return out

    def space(self, namespace: str) -> dict[bytes, bytes | None]:
        """The writes to ``namespace``, to add to in bulk."""
        found = self.spaces.get(namespace)
        if found is None:
            found = self.spaces[namespace] = {}
        return found

    def put(self, namespace: str, key: bytes, value: bytes) -> None:
        self.space(namespace)[key] = value

    def delete(self, namespace: str, key: bytes) -> None:
        self.space(namespace)[key] = None

    def update(self, other: WriteBatch) -> None:
        """``other``'s writes, winning over these."""
        for ns, writes in other.spaces.items():
            self.space(ns).update(writes)

    def only(self, namespaces: Container[str]) -> WriteBatch:
        """A copy of the writes to ``namespaces`` (later writes here do not show in it)."""
        return WriteBatch({ns: dict(w) for ns, w in self.spaces.items() if ns in namespaces and w})

    def touches(self, namespace: str) -> bool:
        return bool(self.spaces.get(namespace))

    def items(self) -> Iterable[tuple[str, bytes, bytes | None]]:
        for ns, writes in self.spaces.items():
            for key, value in writes.items():
                yield ns, key, value

    def __len__(self) -> int:
        return sum(len(w) for w in self.spaces.values())


class StateStore(StateReader, Protocol):
    def apply(self, batch: WriteBatch) -> None:
        """Apply every mutation of ``batch`` atomically."""
        ...


class OverlayReader:
    """Reads through a pending ``WriteBatch`` first, then the underlying state.

    Lets one iteration see its own writes (several rows of a batch hitting one key)
    without touching the store before the transaction commits.
    """

    def __init__(self, base: StateReader, pending: WriteBatch) -> None:
        self._base = base
        self._pending = pending

    def narrowed(self, namespaces: Container[str]) -> StateReader:
        """This view for reads of ``namespaces`` only: the state itself when nothing pending
        touches them (no merge per scan), else an overlay of just their pending writes."""
        base = (
            self._base.narrowed(namespaces) if isinstance(self._base, OverlayReader) else self._base
        )
        mine = self._pending.only(namespaces)
        return OverlayReader(base, mine) if mine.spaces else base

    def get(self, namespace: str, key: bytes) -> bytes | None:
        hit = self._pending.spaces.get(namespace, {}).get(key, _MISSING)
        return self._base.get(namespace, key) if hit is _MISSING else hit  # type: ignore[return-value]

    def multi_get(self, namespace: str, keys: list[bytes]) -> list[bytes | None]:
        base = self._base.multi_get(namespace, keys)
        out: list[bytes | None] = []
        mine = self._pending.spaces.get(namespace, {})
        for key, value in zip(keys, base, strict=True):
            hit = mine.get(key, _MISSING)
            out.append(value if hit is _MISSING else hit)  # type: ignore[arg-type]
        return out

    def scan(
        self, namespace: str, start: bytes, end: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        merged = dict(self._base.scan(namespace, start, end))
        for key, value in self._pending.spaces.get(namespace, {}).items():
            if key >= start and (end is None or key < end):
                if value is None:
                    merged.pop(key, None)
                else:
                    merged[key] = value
        yield from sorted(merged.items())

    def last(self, namespace: str, start: bytes, end: bytes) -> tuple[bytes, bytes] | None:
        found = None
        for item in self.scan(namespace, start, end):  # pending deletes may hide the base's
            found = item
        return found

    def scan_ranges(
        self, namespace: str, bounds: Sequence[tuple[bytes, bytes]]
    ) -> tuple[list[tuple[bytes, bytes]], list[int]]:
        if not self._pending.touches(namespace):
            return self._base.scan_ranges(namespace, bounds)
        return scan_each(self, namespace, bounds)


_MISSING = object()


class MemoryState:
    """An in-process ``StateStore``: the mock client's hangar, and the reference in tests.

    Keeps a sorted key list per namespace so range scans cost O(log n + hits), as in RocksDB.
    """

    def __init__(self) -> None:
        self._data: dict[str, dict[bytes, bytes]] = {}
        self._order: dict[str, list[bytes]] = {}

    def get(self, namespace: str, key: bytes) -> bytes | None:
        return self._data.get(namespace, {}).get(key)

    def multi_get(self, namespace: str, keys: list[bytes]) -> list[bytes | None]:
        ns = self._data.get(namespace, {})
        return [ns.get(k) for k in keys]

    def scan(
        self, namespace: str, start: bytes, end: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        ns = self._data.get(namespace, {})
        order = self._order.get(namespace, [])
        i = bisect.bisect_left(order, start)
        stop = len(order) if end is None else bisect.bisect_left(order, end)
        for key in order[i:stop]:
            yield key, ns[key]

    def last(self, namespace: str, start: bytes, end: bytes) -> tuple[bytes, bytes] | None:
        order = self._order.get(namespace, [])
        i = bisect.bisect_left(order, end) - 1
        if i < 0 or order[i] < start:
            return None
        return order[i], self._data[namespace][order[i]]

    def scan_ranges(
        self, namespace: str, bounds: Sequence[tuple[bytes, bytes]]
    ) -> tuple[list[tuple[bytes, bytes]], list[int]]:
        return scan_each(self, namespace, bounds)

    def apply(self, batch: WriteBatch) -> None:
        for ns, key, value in batch.items():
            data = self._data.setdefault(ns, {})
            order = self._order.setdefault(ns, [])
            if value is None:
                if data.pop(key, None) is not None:
                    del order[bisect.bisect_left(order, key)]
            else:
                if key not in data:
                    bisect.insort(order, key)
                data[key] = value
