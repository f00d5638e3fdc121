"""Hangar snapshots in S3 (or a local directory), incremental as Flink's and RocksDB's own
backup engine are: a snapshot uploads only the SST files the store does not hold yet.

Layout under a partition's prefix:

- ``{marker+1:020d}-{id}.snap``: one snapshot. A tar of the checkpoint's small files
  (``CURRENT``, ``MANIFEST``, ``OPTIONS``, logs) and ``files.json``, which names the stored
  object of each SST file. Keys sort by the replaylog marker read before the snapshot's
  checkpoint (a lower bound of the one the state holds, which recovery reads: batches go on
  while it is taken), so "newest" is the last one. A ``.tar`` of the same stem is a full
  snapshot (the earlier format), still restored.
- ``sst/{session}-{name}``: an SST (or blob) file, immutable, shared by the snapshots that
  name it. ``session`` is unique to the store object that uploaded it: RocksDB may give a
  number again after a crash, or another runner's state may hold a different file of the same
  name, so a file's name alone never identifies stored bytes. Within a session it does: a
  live database never reuses a number, and the files a restore unpacked are the ones its
  snapshot names.

A snapshot becomes visible with its ``.snap`` object, written after all its files, so a crash
during an upload leaves only unreferenced files behind. ``prune`` deletes snapshots beyond
``keep`` and then the files no kept snapshot names, once older than ``ORPHAN_GRACE_S``: a
younger one may belong to an upload still in flight (a fenced runner's, say).

A snapshot racing a delete of its job never outlives it: the bank deletes the prefix's
marker first and the objects after, and an upload checks the marker after its last PUT —
gone or re-created (another incarnation), the upload withdraws what it wrote
(``PrefixReleased``).
"""

from __future__ import annotations

import json
import logging
import shutil
import tarfile
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from fennel_dagster.engine.faults import maybe_crash
from fennel_dagster.engine.object_store import ObjectStore, object_store
from fennel_dagster.errors import FennelError
from fennel_dagster.settings import Settings
from fennel_dagster.wire import plan

log = logging.getLogger("fennel_dagster.engine.snapshots")
T = TypeVar("T")

FORMAT = 1  # of files.json
SHARED_SUFFIXES = (".sst", ".blob")  # immutable once written: stored once, shared
ORPHAN_GRACE_S = 900.0
TRANSFERS = 4  # files uploaded or downloaded at once (each a few round trips of S3 latency)  # an unreferenced file younger than this may be an upload in flight
SNAPSHOT_SUFFIXES = (".snap", ".tar")


class PrefixReleased(FennelError):
    """The job's snapshot prefix was destroyed (or re-created) while a snapshot was uploaded."""


class SnapshotUnreadable(FennelError):
    """No stored snapshot of a job partition could be restored (files missing or damaged)."""


@dataclass(frozen=True)
class StoredFile:
    key: str  # relative to the partition's prefix
    size: int


Files = dict[str, StoredFile]  # file name in the checkpoint -> its stored object


@dataclass(frozen=True)
class Uploaded:
    """One snapshot stored: its key, and what it cost. ``stored_*`` count every object it
    wrote (its new SST files and its ``.snap``); ``reused_files`` the SST files it names that
    an earlier snapshot stored (a ``.snap`` is never reused)."""

    key: str
    stored_files: int
    stored_bytes: int
    reused_files: int


class SnapshotStore:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.objects: ObjectStore = object_store(settings)
        self.session = uuid.uuid4().hex[:12]
        self._born: dict[str, str] = {}  # job -> the incarnation first seen by this store
        self._held: dict[tuple[str, int], Files] = {}  # what the newest snapshot names
        self._named: dict[str, frozenset[str]] = {}  # snapshot key -> file keys it names

    def prefix(self, job: str, partition: int) -> str:
        """Under the prefix the bank created for the job (``plan.snapshot_prefix``)."""
        return f"{self.settings.namespace}/{plan.snapshot_prefix(job)}p{partition}/"

    def incarnation(self, job: str) -> str:
        """The id the bank gave the job's snapshot prefix when it created it ("" if none)."""
        found = self._read_incarnation(job)
        self._born.setdefault(job, found)
        return found

    def _read_incarnation(self, job: str) -> str:
        key = f"{self.settings.namespace}/{plan.snapshot_prefix(job)}.fennel-asset"
        body = self.objects.get_bytes(key)
        if body is None:
            return ""
        try:
            return str(json.loads(body).get("incarnation", ""))
        except ValueError:
            return ""

    def keys(self, job: str, partition: int) -> list[str]:
        """The partition's snapshots, oldest first."""
        found = self.objects.list(self.prefix(job, partition))
        return sorted(o.key for o in found if o.key.endswith(SNAPSHOT_SUFFIXES))

    # ------------------------------------------------------------------ upload

    def upload(self, job: str, partition: int, marker: int | None, checkpoint: Path) -> Uploaded:
        prefix = self.prefix(job, partition)
        stem = f"{(marker if marker is not None else -1) + 1:020d}-{uuid.uuid4().hex[:8]}"
        key = f"{prefix}{stem}.snap"
        born = self._born[job] if job in self._born else self.incarnation(job)
        held = self._held.get((job, partition), {})
        files: Files = {}
        written: list[str] = []
        stored_bytes = 0
        new: list[tuple[str, Path]] = []
        for path in sorted(checkpoint.iterdir()):
            if not path.name.endswith(SHARED_SUFFIXES):
                continue
            size = path.stat().st_size
            known = held.get(path.name)
            if known is not None and known.size == size:
                files[path.name] = known
                continue
            files[path.name] = StoredFile(f"sst/{self.session}-{path.name}", size)
            new.append((prefix + files[path.name].key, path))
            stored_bytes += size
        # a failed upload changes nothing held: the newest snapshot still names those files
        _each(lambda kp: self.objects.put_file(*kp), new)
        written += [k for k, _ in new]
        maybe_crash("during_snapshot")
        with tempfile.TemporaryDirectory(prefix="fd-snap-") as tmp:
            archive = Path(tmp) / "snapshot.tar"
            _pack(checkpoint, files, archive)
            self.objects.put_file(key, archive)
            stored_bytes += archive.stat().st_size
        written.append(key)
        if born and self._read_incarnation(job) != born:  # released (or re-created) meanwhile
            self.objects.delete(written)
            self._held.pop((job, partition), None)
            raise PrefixReleased(
                f"the snapshot prefix of job {job} was released during an upload; withdrew {key}"
            )
        self._held[(job, partition)] = files
        self._named[key] = frozenset(f.key for f in files.values())
        return Uploaded(key, len(written), stored_bytes, len(files) + 1 - len(written))

    # ----------------------------------------------------------------- restore

    def restore_latest(self, job: str, partition: int, dest: Path) -> str | None:
        """Unpack the newest readable snapshot into ``dest`` (replaced); None if there is
        none. A snapshot whose files are missing (deleted by hand, or by a runner that
        thought them orphans) gives way to the one before it, logged: recovery then replays
        more of the replaylog."""
        keys = self.keys(job, partition)
        failures: list[str] = []
        for key in reversed(keys):
            try:
                self._restore(job, partition, key, dest)
                return key
            except (FileNotFoundError, _Damaged) as e:
                log.warning("%s p%d: snapshot %s is unreadable (%s); trying the one before",
                            job, partition, key, e)  # fmt: skip
                failures.append(f"{key}: {e}")
        if failures:
            raise SnapshotUnreadable(
                f"job {job} p{partition}: none of its {len(keys)} snapshots could be restored "
                f"({'; '.join(failures)}); delete them to rebuild the state from the replaylog"
            )
        return None

    def _restore(self, job: str, partition: int, key: str, dest: Path) -> None:
        prefix = self.prefix(job, partition)
        with tempfile.TemporaryDirectory(prefix="fd-restore-") as tmp:
            archive = Path(tmp) / "snapshot.tar"
            self.objects.get_file(key, archive)
            unpacked = Path(tmp) / "out"
            with tarfile.open(archive) as tar:
                tar.extractall(unpacked, filter="data")
            state = unpacked / "state"
            files = _files(unpacked / "files.json")
            _each(lambda nf: self.objects.get_file(prefix + nf[1].key, state / nf[0]),
                  list(files.items()))  # fmt: skip
            for name, stored in files.items():
                if (state / name).stat().st_size != stored.size:
                    raise _Damaged(f"{stored.key} has {(state / name).stat().st_size} bytes, "
                                   f"not {stored.size}")  # fmt: skip
            if dest.exists():
                shutil.rmtree(dest)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(state), dest)
        self._held[(job, partition)] = files
        self._named[key] = frozenset(f.key for f in files.values())

    # ------------------------------------------------------------------- prune

    def prune(self, job: str, partition: int, keep: int) -> int:
        """Delete snapshots beyond the newest ``keep`` (all kept if ``keep`` <= 0), then the
        files none of the rest name (see ``ORPHAN_GRACE_S``). Returns how many snapshots went."""
        prefix = self.prefix(job, partition)
        keys = self.keys(job, partition)
        old = keys[:-keep] if keep > 0 else []
        kept = keys[len(old) :]
        self.objects.delete(old)
        for key in old:
            self._named.pop(key, None)
        named: set[str] = set()
        for key in kept:
            named |= self._names(prefix, key)
        stale = time.time() - ORPHAN_GRACE_S
        orphans = [
            o.key
            for o in self.objects.list(prefix + "sst/")
            if o.key[len(prefix) :] not in named and o.modified < stale
        ]
        self.objects.delete(orphans)
        return len(old)

    def _names(self, prefix: str, key: str) -> frozenset[str]:
        if key not in self._named:
            names: frozenset[str] = frozenset()
            if key.endswith(".snap"):
                with tempfile.TemporaryDirectory(prefix="fd-snap-") as tmp:
                    archive = Path(tmp) / "snapshot.tar"
                    try:
                        self.objects.get_file(key, archive)
                    except FileNotFoundError:
                        return frozenset()  # pruned meanwhile by another runner
                    with tarfile.open(archive) as tar:
                        member = tar.extractfile("files.json")
                        assert member is not None
                        names = frozenset(f.key for f in _parse(member.read()).values())
            self._named[key] = names
        return self._named[key]


class _Damaged(FennelError):
    """A snapshot's file is not what its manifest says (restore tries the one before)."""


def _each(transfer: Callable[[T], None], items: list[T]) -> None:
    """``transfer`` every item, ``TRANSFERS`` at a time; the first failure raises."""
    if len(items) <= 1:
        for item in items:
            transfer(item)
        return
    with ThreadPoolExecutor(min(TRANSFERS, len(items)), thread_name_prefix="snapshot") as pool:
        for done in [pool.submit(transfer, item) for item in items]:
            done.result()


def _pack(checkpoint: Path, files: Files, archive: Path) -> None:
    manifest = {
        "format": FORMAT,
        "files": {n: {"key": f.key, "size": f.size} for n, f in sorted(files.items())},
    }
    listing = archive.with_name("files.json")
    listing.write_text(json.dumps(manifest))
    with tarfile.open(archive, "w") as tar:
        tar.add(listing, arcname="files.json")
        tar.add(checkpoint, arcname="state", recursive=False)
        for path in sorted(checkpoint.iterdir()):
            if path.name not in files:
                tar.add(path, arcname=f"state/{path.name}")


def _files(listing: Path) -> Files:
    """The shared files a snapshot names; none for a full (``.tar``) snapshot."""
    return _parse(listing.read_bytes()) if listing.exists() else {}


def _parse(raw: bytes) -> Files:
    manifest = json.loads(raw)
    if manifest.get("format") != FORMAT:
        raise _Damaged(f"files.json of format {manifest.get('format')!r}, not {FORMAT}")
    return {n: StoredFile(str(f["key"]), int(f["size"])) for n, f in manifest["files"].items()}
