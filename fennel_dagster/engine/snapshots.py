"""Hangar snapshots: RocksDB checkpoints as tar objects in S3 (or a local directory).

Object keys sort by the replaylog marker the snapshot reflects, so "newest" is the last key
under a partition's prefix. An upload is one PUT (multipart for big ones), so a crash during
upload leaves no partial snapshot visible; older snapshots beyond ``keep`` are deleted only
after a newer one is stored.

A snapshot racing a delete of its job never outlives it: the bank deletes the prefix's
marker first and the objects after, and an upload checks the marker after its PUT — gone or
re-created (another incarnation), the upload withdraws its object (``PrefixReleased``).
"""

from __future__ import annotations

import json
import shutil
import tarfile
import tempfile
import uuid
from pathlib import Path

from botocore.exceptions import ClientError

from fennel_dagster.engine.faults import maybe_crash
from fennel_dagster.errors import FennelError
from fennel_dagster.s3 import s3_client
from fennel_dagster.settings import Settings
from fennel_dagster.wire import plan


class PrefixReleased(FennelError):
    """The job's snapshot prefix was destroyed (or re-created) while a snapshot was uploaded."""


class SnapshotStore:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.bucket = settings.s3_bucket
        self._client = None
        self._born: dict[str, str] = {}  # job -> the incarnation first seen by this store
        self.local: Path | None = settings.local_object_dir if settings.s3_embedded else None

    @property
    def client(self):  # type: ignore[no-untyped-def]
        if self._client is None:
            self._client = s3_client(self.settings)
        return self._client

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
        try:
            if self.local is not None:
                body = (self.local / self.bucket / key).read_bytes()
            else:
                body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except FileNotFoundError:
            return ""
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return ""
            raise
        try:
            return str(json.loads(body).get("incarnation", ""))
        except ValueError:
            return ""

    def keys(self, job: str, partition: int) -> list[str]:
        prefix = self.prefix(job, partition)
        if self.local is not None:
            base = self.local / self.bucket / prefix
            return sorted(prefix + p.name for p in base.glob("*.tar")) if base.exists() else []
        keys: list[str] = []
        token: dict[str, str] = {}
        while True:
            page = self.client.list_objects_v2(Bucket=self.bucket, Prefix=prefix, **token)
            keys += [o["Key"] for o in page.get("Contents", [])]
            if not page.get("IsTruncated"):
                return sorted(keys)
            token = {"ContinuationToken": page["NextContinuationToken"]}

    def upload(self, job: str, partition: int, marker: int | None, checkpoint: Path) -> str:
        key = f"{self.prefix(job, partition)}{(marker if marker is not None else -1) + 1:020d}-{uuid.uuid4().hex[:8]}.tar"
        born = self._born[job] if job in self._born else self.incarnation(job)
        with tempfile.TemporaryDirectory(prefix="fd-snap-") as tmp:
            archive = Path(tmp) / "snapshot.tar"
            with tarfile.open(archive, "w") as tar:
                tar.add(checkpoint, arcname="state")
            maybe_crash("during_snapshot")
            if self.local is not None:
                dest = self.local / self.bucket / key
                dest.parent.mkdir(parents=True, exist_ok=True)
                part = dest.with_suffix(".part")
                shutil.copyfile(archive, part)
                part.rename(dest)
            else:
                self.client.upload_file(str(archive), self.bucket, key)
        if born and self._read_incarnation(job) != born:  # released (or re-created) meanwhile
            self._delete(key)
            raise PrefixReleased(
                f"the snapshot prefix of job {job} was released during an upload; withdrew {key}"
            )
        return key

    def _delete(self, key: str) -> None:
        if self.local is not None:
            (self.local / self.bucket / key).unlink(missing_ok=True)
        else:
            self.client.delete_object(Bucket=self.bucket, Key=key)

    def restore_latest(self, job: str, partition: int, dest: Path) -> str | None:
        """Unpack the newest snapshot into ``dest`` (replaced); None if there is none."""
        keys = self.keys(job, partition)
        if not keys:
            return None
        key = keys[-1]
        with tempfile.TemporaryDirectory(prefix="fd-restore-") as tmp:
            archive = Path(tmp) / "snapshot.tar"
            if self.local is not None:
                shutil.copyfile(self.local / self.bucket / key, archive)
            else:
                self.client.download_file(self.bucket, key, str(archive))
            unpacked = Path(tmp) / "out"
            with tarfile.open(archive) as tar:
                tar.extractall(unpacked, filter="data")
            if dest.exists():
                shutil.rmtree(dest)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(unpacked / "state"), dest)
        return key

    def prune(self, job: str, partition: int, keep: int) -> int:
        old = self.keys(job, partition)[:-keep] if keep > 0 else []
        for key in old:
            if self.local is not None:
                (self.local / self.bucket / key).unlink(missing_ok=True)
            else:
                self.client.delete_object(Bucket=self.bucket, Key=key)
        return len(old)
