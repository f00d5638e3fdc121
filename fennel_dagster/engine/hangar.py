"""Hangar on RocksDB (rocksdict): a job partition's state, with the offsets it reflects.

Each operator namespace is a column family. Besides the operators' state, the ``__meta__``
family records which input offsets and which replaylog marker the state reflects; both are
written in the same RocksDB write batch as the mutations, so state and offsets can never
disagree — the invariant recovery relies on.

``Hangar.open_secondary`` opens a read-only follower of a live hangar (RocksDB's secondary
instance), which is how an engine's lookup endpoint reads the state its runners write.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import shutil
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from rocksdict import AccessType, Checkpoint, Options, Rdict, ReadOptions
from rocksdict import WriteBatch as RocksBatch

from fennel_dagster.engine.failures import RecoveryError
from fennel_dagster.engine.rocks_tuning import RocksTuning
from fennel_dagster.ops.state import WriteBatch, rewritten_in_place

META = "__meta__"
# A follower reopens after a WAL rotation only while its primary's live WALs hold at most this
# much: reopening replays them (about 13 MB/s on a loaded two-core host).
REOPEN_WAL_MAX = 1 << 20
_TICK_NS = 50_000_000  # beyond any kernel's coarse clock tick (1-10 ms)
_OFFSETS = b"offsets"
_MARKER = b"marker"


class Hangar:
    """The state store of one job partition; implements ``StateStore``."""

    def __init__(
        self, path: Path, secondary: Path | None = None, tuning: RocksTuning | None = None
    ) -> None:
        self.path = Path(path)
        self.secondary = secondary
        self.tuning = tuning or RocksTuning()
        self._cache = self.tuning.cache()
        self._watched: list[str] = []  # primary_version's files, as last listed
        self._listed_at: int | None = None  # the directory's mtime then
        self._listed_wall = 0  # and the time of that listing (ns since the epoch)
        self._wals: tuple[str, ...] | None = None  # the primary's WAL files at catch-up
        self.path.mkdir(parents=True, exist_ok=True)
        self._open()

    @classmethod
    def open_secondary(cls, path: Path, scratch: Path, tuning: RocksTuning | None = None) -> Hangar:
        return cls(path, secondary=scratch, tuning=tuning)

    def _options(self, namespace: str = "default") -> Options:
        follower = self.secondary is not None
        in_place = not follower and rewritten_in_place(namespace)
        return self.tuning.family(self._cache, in_place, follower)

    def _open(self) -> None:
        families = Rdict.list_cf(str(self.path)) if (self.path / "CURRENT").exists() else []
        cfs = {name: self._options(name) for name in families if name != "default"}
        if self.secondary is not None:
            self.secondary.mkdir(parents=True, exist_ok=True)
            self._db = Rdict(
                str(self.path),
                self._options(),
                column_families=cfs,
                access_type=AccessType.secondary(str(self.secondary)),
            )
        else:
            opts = self._options()
            opts.create_if_missing(True)
            opts.create_missing_column_families(True)
            try:
                self._db = Rdict(str(self.path), opts, column_families=cfs)
            except Exception as e:
                if "lock" not in str(e).lower():
                    raise
                # another runner of this partition still holds it (stopping, or an orphan
                # about to be fenced or killed): wait, do not count it as a restart loop
                raise RecoveryError(f"state {self.path} is locked by another runner: {e}") from e
        self._families: dict[str, Any] = {}
        self._handles: dict[str, Any] = {}
        for name in cfs:
            self._families[name] = self._db.get_column_family(name)
            self._handles[name] = self._db.get_column_family_handle(name)

    def close(self) -> None:
        if getattr(self, "_db", None) is None:
            return
        self._families.clear()
        self._handles.clear()
        self._db.close()
        self._db = None  # type: ignore[assignment]
        if self.secondary is None:  # rocksdict releases the file lock once every handle is gone
            gc.collect()

    def __enter__(self) -> Hangar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ families

    def _family(self, namespace: str, create: bool = False) -> Any:
        fam = self._families.get(namespace)
        if fam is None and create:
            fam = self._db.create_column_family(namespace, self._options(namespace))
            self._families[namespace] = fam
            self._handles[namespace] = self._db.get_column_family_handle(namespace)
        return fam

    def namespaces(self) -> list[str]:
        return sorted(n for n in self._families if n != META)

    def primary_version(self) -> tuple[tuple[str, int, int], ...]:
        """A cheap fingerprint of the primary's files (WAL, MANIFEST, CURRENT): every write
        appends to the WAL, so an unchanged fingerprint means nothing new to catch up on.

        The directory is listed again only when its own mtime moved (a file was created or
        removed); otherwise the files listed last time are stat'ed, which costs a fifth of
        a listing (a hangar holds dozens of SST and option files). File times tick on the
        kernel's coarse clock, so a listing made within ``_TICK_NS`` of the directory's
        mtime is not trusted: a file created later in that tick would not move it."""
        here = str(self.path)
        moved = os.stat(here).st_mtime_ns
        if moved != self._listed_at or self._listed_wall - moved < _TICK_NS:
            self._listed_wall = time.time_ns()
            with os.scandir(here) as entries:
                names = sorted(e.name for e in entries
                               if e.name.endswith(".log") or e.name.startswith(("MANIFEST", "CURRENT")))  # fmt: skip
            self._watched, self._listed_at = [os.path.join(here, n) for n in names], moved
        out = []
        for path in self._watched:
            try:
                st = os.stat(path)
            except FileNotFoundError:  # removed within the mtime's tick: list again
                self._listed_at = None
                return self.primary_version()
            out.append((os.path.basename(path), st.st_size, st.st_mtime_ns))
        return tuple(out)

    def catch_up(self) -> None:
        """Secondary only: see the primary's newest writes (and column families).

        After the primary flushed (its WAL files changed), RocksDB's catch-up misses the
        writes of the flushed WAL's tail until the primary writes again (measured: the last
        write before a snapshot stayed invisible on an idle stream); reopening sees them.
        But reopening replays every live WAL, holding the GIL: while a flushed WAL is still
        live (its flush under way, or other families' writes in it), that is a whole memtable
        (a 5 s stall of every lookup under load, measured). Then this catches up as RocksDB
        does, and reopens once the WALs are small again: a flush that follows a write (a full
        memtable) hides nothing, and an explicit one (a snapshot's) flushes every family, so
        its old WAL goes as soon as it is done."""
        families = set(Rdict.list_cf(str(self.path))) - {"default"}
        sizes: dict[str, int] = {}
        with os.scandir(self.path) as entries:
            for e in entries:
                if e.name.endswith(".log"):
                    with contextlib.suppress(FileNotFoundError):  # deleted as we list
                        sizes[e.name] = e.stat().st_size
        wals = tuple(sorted(sizes))
        rotated = self._wals is not None and wals != self._wals
        if families - set(self._families) or (rotated and sum(sizes.values()) <= REOPEN_WAL_MAX):
            self._wals = wals
            self.close()
            self._open()
            return
        if not rotated:
            self._wals = wals
        self._db.try_catch_up_with_primary()

    # ------------------------------------------------------------------ StateReader

    def get(self, namespace: str, key: bytes) -> bytes | None:
        fam = self._family(namespace)
        return None if fam is None else fam.get(key)

    def multi_get(self, namespace: str, keys: list[bytes]) -> list[bytes | None]:
        fam = self._family(namespace)
        if fam is None or not keys:
            return [None] * len(keys)
        return list(fam.get(keys))

    def scan(
        self, namespace: str, start: bytes, end: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        fam = self._family(namespace)
        if fam is None:
            return
        if end is not None:
            # RocksDB stops at the bound itself: no Python comparison per entry, and it
            # need not look past ``end`` in any level (most scans read a few entries)
            bounded = ReadOptions()
            bounded.set_iterate_upper_bound(end)
            yield from fam.items(from_key=start, read_opt=bounded)
            return
        it = fam.iter()
        it.seek(start)
        while it.valid():
            yield it.key(), it.value()
            it.next()

    def scan_ranges(
        self, namespace: str, bounds: Sequence[tuple[bytes, bytes]]
    ) -> tuple[list[tuple[bytes, bytes]], list[int]]:
        """One iterator sought to each range: making an iterator costs ~10 us (a bounded
        one per range made thousands of short scans a batch's largest cost), a seek ~3.
        Unbounded, a seek past a range's end walks over deleted entries until a live one,
        so this suits namespaces that rarely delete (a window's events and tiles)."""
        items: list[tuple[bytes, bytes]] = []
        counts: list[int] = []
        fam = self._family(namespace)
        if fam is None:
            return items, [0] * len(bounds)
        it = fam.iter()
        seek, valid, key, value, step = it.seek, it.valid, it.key, it.value, it.next
        add = items.append
        for start, end in bounds:
            before = len(items)
            seek(start)
            while valid():
                k = key()
                if k >= end:
                    break
                add((k, value()))
                step()
            counts.append(len(items) - before)
        return items, counts

    def last(self, namespace: str, start: bytes, end: bytes) -> tuple[bytes, bytes] | None:
        fam = self._family(namespace)
        if fam is None:
            return None
        it = fam.iter()
        it.seek_for_prev(end)
        if it.valid() and it.key() >= end:  # seek_for_prev stops at ``end`` itself
            it.prev()
        if not it.valid() or it.key() < start:
            return None
        return it.key(), it.value()

    # ------------------------------------------------------------------ writes

    def apply(
        self,
        batch: WriteBatch,
        offsets: Mapping[tuple[str, int], int] | None = None,
        marker: int | None = None,
    ) -> None:
        """Apply ``batch`` and record ``offsets`` (next offset per input) and ``marker``
        (the replaylog offset of the batch) in one atomic RocksDB write."""
        rb = RocksBatch(raw_mode=True)
        put, delete = rb.put, rb.delete
        handles = self._handles
        for ns, writes in batch.spaces.items():
            if not writes:
                continue
            handle = handles.get(ns)
            if handle is None:
                self._family(ns, create=True)
                handle = handles[ns]
            for key, value in writes.items():
                if value is None:
                    delete(key, handle)
                else:
                    put(key, value, handle)
        if offsets is not None or marker is not None:
            self._family(META, create=True)
            meta = self._handles[META]
            if offsets is not None:
                merged = {**self.offsets(), **offsets}
                rb.put(_OFFSETS, _encode_offsets(merged), meta)
            if marker is not None:
                rb.put(_MARKER, str(marker).encode(), meta)
        self._db.write(rb)

    # ------------------------------------------------------------------ meta

    def offsets(self) -> dict[tuple[str, int], int]:
        raw = self.get(META, _OFFSETS)
        return {} if raw is None else _decode_offsets(raw)

    def marker(self) -> int | None:
        """Offset in the replaylog of the newest batch this state reflects (None: none)."""
        raw = self.get(META, _MARKER)
        return None if raw is None else int(raw)

    # ------------------------------------------------------------------ snapshots

    def flush_in_background(self) -> None:
        """Ask RocksDB to flush every memtable in its own threads, and return at once."""
        self._db.flush(False)
        for fam in self._families.values():
            fam.flush(False)

    def checkpoint(self, dest: Path) -> Path:
        """A consistent, hard-linked copy of the whole store at ``dest`` (must not exist); safe
        from another thread while batches are applied (``test_checkpoint_beside_writes``)."""
        if dest.exists():
            shutil.rmtree(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        ck = Checkpoint(self._db)
        try:
            ck.create_checkpoint(str(dest))
        finally:
            del ck
        return dest


def _encode_offsets(offsets: Mapping[tuple[str, int], int]) -> bytes:
    return json.dumps(sorted([t, p, o] for (t, p), o in offsets.items())).encode()


def _decode_offsets(raw: bytes) -> dict[tuple[str, int], int]:
    return {(t, int(p)): int(o) for t, p, o in json.loads(raw)}
