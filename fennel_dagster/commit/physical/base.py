"""Create and destroy physical assets, idempotently, with retries and clear failures.

Topics live in Kafka (admin API), prefixes and offline tables in the object store (S3 via
boto3, or a local directory); jobs have no physical side of their own: their existence is the
job-registry row written at the commit point.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from tenacity import Retrying, stop_after_attempt, wait_exponential

from fennel_dagster.commit.blueprint import Blueprint
from fennel_dagster.errors import CommitError
from fennel_dagster.s3 import s3_client
from fennel_dagster.settings import Settings

T = TypeVar("T")


class AssetStoreError(CommitError, RuntimeError):
    """A physical operation that kept failing after its retries."""


def retry(what: str, fn: Callable[[], T], attempts: int = 4, first_delay: float = 0.2) -> T:
    """``fn`` with exponential backoff (Kafka and S3 clients raise many types, all retried);
    after ``attempts`` tries an ``AssetStoreError`` naming ``what``."""
    try:
        return Retrying(
            stop=stop_after_attempt(attempts),
            wait=wait_exponential(multiplier=first_delay, min=first_delay, max=10.0),
            reraise=True,
        )(fn)
    except Exception as e:
        raise AssetStoreError(f"{what} failed after {attempts} attempts: {e}") from e


class PhysicalAssets:
    def __init__(self, settings: Settings, attempts: int = 4) -> None:
        self.s = settings
        self.attempts = attempts
        self._admin: AdminClient | None = None

    # ---------------------------------------------------------------- kafka

    def admin(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient(
                {
                    "bootstrap.servers": self.s.kafka_servers,
                    "socket.timeout.ms": 5000,
                    "log_level": 0,
                }
            )
        return self._admin

    def topics(self, prefix: str) -> set[str]:
        meta = retry(
            "listing Kafka topics", lambda: self.admin().list_topics(timeout=5), self.attempts
        )
        return {t for t in meta.topics if t.startswith(prefix)}

    def _create_topic(self, bp: Blueprint) -> None:
        spec = bp.spec_dict()
        topic = NewTopic(bp.name, int(spec["partitions"]), 1, config=dict(spec.get("configs", {})))

        def create() -> None:
            fut = self.admin().create_topics([topic], operation_timeout=10, request_timeout=10)[
                bp.name
            ]
            try:
                fut.result(timeout=15)
            except KafkaException as e:
                if "TOPIC_ALREADY_EXISTS" not in str(e):
                    raise

        retry(
            f"creating Kafka topic {bp.name} (broker {self.s.kafka_servers})", create, self.attempts
        )

    def _delete_topic(self, bp: Blueprint) -> None:
        def delete() -> None:
            fut = self.admin().delete_topics([bp.name], operation_timeout=10, request_timeout=10)[
                bp.name
            ]
            try:
                fut.result(timeout=15)
            except KafkaException as e:
                if "UNKNOWN_TOPIC" not in str(e):
                    raise

        retry(
            f"deleting Kafka topic {bp.name} (broker {self.s.kafka_servers})", delete, self.attempts
        )

    def _delete_groups(self, bp: Blueprint) -> None:
        """A destroyed job's consumer groups (one per partition, ``<job>.p<n>``): a job
        committed again under the same name must start clean, not at offsets the deleted
        one committed (its replaylog, and so its state, are gone)."""
        groups = [f"{bp.name}.p{i}" for i in range(int(bp.spec_dict().get("partitions", 1)))]

        def delete() -> None:
            for group, fut in (
                self.admin().delete_consumer_groups(groups, request_timeout=10).items()
            ):
                try:
                    fut.result(timeout=15)
                except KafkaException as e:
                    if "GROUP_ID_NOT_FOUND" not in str(e):
                        raise RuntimeError(f"consumer group {group}: {e}") from e

        retry(f"deleting the consumer groups of job {bp.name}", delete, self.attempts)

    # ---------------------------------------------------------------- object store

    def _prefix(self, bp: Blueprint) -> str:
        return f"{self.s.namespace}/{bp.spec_dict()['bucket_prefix']}"

    def _marker(self, bp: Blueprint) -> str:
        return self._prefix(bp) + ".fennel-asset"

    def _create_prefix(self, bp: Blueprint) -> None:
        # a fresh incarnation each time the prefix is created: a runner whose local state
        # carries another one (a deleted and re-created job of the same name) drops it
        body = json.dumps({"spec": bp.spec_dict(), "incarnation": uuid.uuid4().hex}).encode()
        if self.s.s3_url is None:
            path = self.s.local_object_dir / self.s.s3_bucket / self._marker(bp)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(body)
            return

        client = s3_client(self.s)
        retry(f"creating S3 prefix {self._prefix(bp)}", lambda: client.put_object(
            Bucket=self.s.s3_bucket, Key=self._marker(bp), Body=body), self.attempts)  # fmt: skip

    def _delete_prefix(self, bp: Blueprint) -> None:
        prefix = self._prefix(bp)
        if self.s.s3_url is None:
            root = self.s.local_object_dir / self.s.s3_bucket
            (root / self._marker(bp)).unlink(missing_ok=True)  # first, as below
            shutil.rmtree(root / prefix, ignore_errors=True)
            return

        client = s3_client(self.s)
        marker = self._marker(bp)

        def delete() -> None:
            # the marker first: a writer that checks it after its PUT (snapshots) withdraws an
            # object this listing missed; then every object, however many (pages of 1,000).
            # A crash part-way leaves the asset "destroying" in the bank: the janitor
            # repeats this, which is idempotent
            client.delete_object(Bucket=self.s.s3_bucket, Key=marker)
            pages = client.get_paginator("list_objects_v2").paginate(
                Bucket=self.s.s3_bucket, Prefix=prefix
            )
            for page in pages:
                keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
                if keys:
                    client.delete_objects(Bucket=self.s.s3_bucket, Delete={"Objects": keys})

        retry(f"deleting S3 prefix {prefix}", delete, self.attempts)

    def prefixes(self) -> set[str]:
        """Markers of the object-store assets under this namespace."""
        root = f"{self.s.namespace}/"
        if self.s.s3_url is None:
            base = self.s.local_object_dir / self.s.s3_bucket
            return {str(p.relative_to(base)) for p in Path(base, root).rglob("*.fennel-asset")}

        pages = (
            s3_client(self.s)
            .get_paginator("list_objects_v2")
            .paginate(Bucket=self.s.s3_bucket, Prefix=root)
        )
        return {o["Key"] for page in pages for o in page.get("Contents", [])
                if o["Key"].endswith(".fennel-asset")}  # fmt: skip

    def stray_objects(self, live: set[str]) -> list[str]:
        """Objects under this namespace outside every prefix in ``live`` (full keys, with the
        namespace): what a destroy, or a writer after it, left behind."""
        root = f"{self.s.namespace}/"
        if self.s.s3_url is None:
            base = self.s.local_object_dir / self.s.s3_bucket
            keys = [str(p.relative_to(base)) for p in Path(base, root).rglob("*") if p.is_file()]
        else:
            pages = (
                s3_client(self.s)
                .get_paginator("list_objects_v2")
                .paginate(Bucket=self.s.s3_bucket, Prefix=root)
            )
            keys = [o["Key"] for page in pages for o in page.get("Contents", [])]
        return sorted(k for k in keys if not any(k.startswith(p) for p in live))

    # ---------------------------------------------------------------- dispatch

    def create(self, bp: Blueprint) -> None:
        if bp.kind == "topic":
            self._create_topic(bp)
        elif bp.kind in ("snapshot_prefix", "offline_table"):
            self._create_prefix(bp)

    def destroy(self, bp: Blueprint) -> None:
        if bp.kind == "topic":
            self._delete_topic(bp)
        elif bp.kind == "job":
            self._delete_groups(bp)
        elif bp.kind in ("snapshot_prefix", "offline_table"):
            self._delete_prefix(bp)
