"""When a runner snapshots its hangar: every ``engine_snapshot_interval_s`` while it has
new writes, on request, and on a graceful stop. The RocksDB checkpoint, the upload (its new
SST files, then its ``.snap``: ``snapshots``) and the retention prune run in a background
thread, one snapshot at a time, so the loop waits neither on RocksDB nor on S3.

A checkpoint flushes every memtable first. Taken in the loop's thread it held the loop for
45-185 ms each interval under a live load (the stream bench's 90%-load freshness tail begins
there: ``bench/README.md``, eleventh round). RocksDB takes it beside the writes that go on:
every batch is one atomic write carrying its offsets and replaylog marker, and the
checkpoint holds the flushed files plus the write-ahead log up to a point, so it holds a
prefix of the batches, whole, and the marker of its newest (a test holds this under
concurrent writes). A due snapshot still asks RocksDB to flush in its background threads
first and takes the checkpoint ``FLUSH_LEAD_S`` later, when little is left to flush.

Staggered: the first interval of each (job, partition) is lengthened by a fixed share of it,
so the runners of one engine, started together, do not all checkpoint and upload at the same
moment (none snapshots sooner than its interval)."""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path

from fennel_dagster.engine.hangar import Hangar
from fennel_dagster.engine.snapshots import PrefixReleased, SnapshotStore, Uploaded

log = logging.getLogger("fennel_dagster.engine.snapshotting")

FLUSH_LEAD_S = 1.0  # from asking RocksDB to flush to taking the checkpoint


class Snapshotter:
    def __init__(
        self,
        store: SnapshotStore,
        job: str,
        partition: int,
        path: Path,
        interval_s: float,
        keep: int,
        on_uploaded: Callable[[Uploaded, float], None] = lambda uploaded, seconds: None,
    ) -> None:
        self.store = store
        self.job = job
        self.partition = partition
        self.path = path
        self.interval_s = interval_s
        self.keep = keep
        self.on_uploaded = on_uploaded
        self.dirty = False  # writes applied since the last snapshot
        self.done = threading.Event()  # set after a requested snapshot is stored
        self._requested = threading.Event()
        self._upload: threading.Thread | None = None
        self._checkpointed = threading.Event()  # clear while a checkpoint is being taken
        self._checkpointed.set()
        self._last = time.monotonic() + interval_s * _phase(job, partition)
        self._taken = 0
        self._flushing_since: float | None = None  # a due snapshot's background flush

    def request(self) -> None:
        """Ask the running loop (another thread) for a snapshot now; see ``done``."""
        self.done.clear()
        self._requested.set()

    def tick(self, hangar: Hangar) -> None:
        """Called by the loop after each batch: a requested or a due snapshot."""
        if self._requested.is_set():
            self._requested.clear()
            self.now(hangar)
        else:
            self._maybe(hangar)

    def now(self, hangar: Hangar) -> None:
        """A snapshot of the current state, stored before returning."""
        self.join()
        self.dirty = True
        self._maybe(hangar, force=True)
        self.join()
        self.done.set()

    def join(self) -> None:
        if self._upload is not None:
            self._upload.join()

    def settle(self) -> None:
        """Wait for a checkpoint being taken in the background: the hangar may close after."""
        self._checkpointed.wait()

    def _maybe(self, hangar: Hangar, force: bool = False) -> None:
        now = time.monotonic()
        due = now - self._last >= self.interval_s
        busy = self._upload is not None and self._upload.is_alive()
        if not self.dirty or not (due or force) or busy:
            return
        if not force:
            if self._flushing_since is None:
                hangar.flush_in_background()
                self._flushing_since = now
            if now - self._flushing_since < FLUSH_LEAD_S:
                return
        self._flushing_since = None
        # the newest batch the checkpoint holds at least (batches go on meanwhile): it only
        # orders the snapshots' names; recovery reads the marker the state holds
        marker = hangar.marker()
        ck = self.path.parent / f".{self.path.name}.ckpt-{os.getpid()}-{self._taken}"
        self._taken += 1
        self._last = time.monotonic()
        self.dirty = False

        def snapshot() -> None:
            try:
                try:
                    hangar.checkpoint(ck)
                finally:
                    self._checkpointed.set()
                started = time.monotonic()
                uploaded = self.store.upload(self.job, self.partition, marker, ck)
                self.store.prune(self.job, self.partition, self.keep)
                self.on_uploaded(uploaded, time.monotonic() - started)
            except PrefixReleased as e:  # the job is being deleted: no snapshot to keep
                log.info("%s p%d: %s", self.job, self.partition, e)
            except Exception:  # noqa: BLE001 - the next snapshot retries; state is safe locally
                log.exception("%s p%d: snapshot failed", self.job, self.partition)
            finally:
                shutil.rmtree(ck, ignore_errors=True)

        name = f"snapshot-{self.job}.p{self.partition}"
        self._upload = threading.Thread(target=snapshot, name=name, daemon=True)
        self._checkpointed.clear()
        try:
            self._upload.start()
        except BaseException:  # no thread: nothing for ``settle`` to wait for
            self._checkpointed.set()
            raise


def _phase(job: str, partition: int) -> float:
    """A fixed share in [0, 1) of one (job, partition): how much later than its interval its
    first snapshot is due, so that runners started together take theirs apart."""
    return zlib.crc32(f"{job}.p{partition}".encode()) % 1000 / 1000
