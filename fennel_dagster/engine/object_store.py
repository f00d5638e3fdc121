"""The few object operations snapshots need, on S3 or on a local directory alike.

One interface with two implementations, so the snapshot layout (``snapshots``) is written
once and both the real S3 server and the embedded mode (``s3_embedded``) run the same code.
A PUT is atomic in both: S3 shows an object only once stored, and the directory form writes
a ``.part`` file and renames it.
"""

from __future__ import annotations

import shutil
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from fennel_dagster.s3 import s3_client
from fennel_dagster.settings import Settings


@dataclass(frozen=True)
class StoredObject:
    key: str
    size: int
    modified: float  # seconds since the epoch


class ObjectStore(ABC):
    @abstractmethod
    def put_file(self, key: str, source: Path) -> None: ...

    @abstractmethod
    def get_file(self, key: str, dest: Path) -> None:
        """Raises ``FileNotFoundError`` if there is no such object."""

    @abstractmethod
    def get_bytes(self, key: str) -> bytes | None:
        """None if there is no such object."""

    @abstractmethod
    def delete(self, keys: list[str]) -> None: ...

    @abstractmethod
    def list(self, prefix: str, recursive: bool = False) -> list[StoredObject]:
        """The objects under ``prefix``; only its direct children unless ``recursive``."""


class S3Objects(ObjectStore):
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.bucket = settings.s3_bucket
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = s3_client(self.settings)
        return self._client

    def put_file(self, key: str, source: Path) -> None:
        self.client.upload_file(str(source), self.bucket, key)

    def get_file(self, key: str, dest: Path) -> None:
        try:
            self.client.download_file(self.bucket, key, str(dest))
        except ClientError as e:
            if _missing(e):
                raise FileNotFoundError(key) from e
            raise

    def get_bytes(self, key: str) -> bytes | None:
        try:
            return bytes(self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read())
        except ClientError as e:
            if _missing(e):
                return None
            raise

    def delete(self, keys: list[str]) -> None:
        for i in range(0, len(keys), 1000):
            chunk = [{"Key": k} for k in keys[i : i + 1000]]
            self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": chunk})

    def list(self, prefix: str, recursive: bool = False) -> list[StoredObject]:
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix, **({} if recursive else {"Delimiter": "/"})
        )
        return [
            StoredObject(o["Key"], int(o["Size"]), o["LastModified"].timestamp())
            for page in pages
            for o in page.get("Contents", [])
        ]


class DirObjects(ObjectStore):
    """Objects as files under ``root/bucket`` (the embedded mode, no S3 server)."""

    def __init__(self, root: Path, bucket: str) -> None:
        self.base = root / bucket

    def put_file(self, key: str, source: Path) -> None:
        dest = self.base / key
        dest.parent.mkdir(parents=True, exist_ok=True)
        part = dest.with_name(dest.name + ".part")
        shutil.copyfile(source, part)
        part.rename(dest)

    def get_file(self, key: str, dest: Path) -> None:
        shutil.copyfile(self.base / key, dest)

    def get_bytes(self, key: str) -> bytes | None:
        try:
            return (self.base / key).read_bytes()
        except FileNotFoundError:
            return None

    def delete(self, keys: list[str]) -> None:
        for key in keys:
            (self.base / key).unlink(missing_ok=True)

    def list(self, prefix: str, recursive: bool = False) -> list[StoredObject]:
        folder = self.base / prefix
        if not folder.is_dir():
            return []
        found = folder.rglob("*") if recursive else folder.iterdir()
        out = []
        for path in found:
            if path.is_file() and not path.name.endswith(".part"):
                st = path.stat()
                out.append(StoredObject(str(path.relative_to(self.base)), st.st_size, st.st_mtime))
        return sorted(out, key=lambda o: o.key)


def object_store(settings: Settings) -> ObjectStore:
    if settings.s3_embedded:
        return DirObjects(settings.local_object_dir, settings.s3_bucket)
    return S3Objects(settings)


def _missing(e: ClientError) -> bool:
    return e.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NotFound")
