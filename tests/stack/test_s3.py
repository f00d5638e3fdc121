"""The S3-compatible server, through boto3 exactly as the engine's snapshots will use it."""

from __future__ import annotations

import pytest

from fennel_dagster.s3 import s3_client
from fennel_dagster.settings import Settings

pytestmark = pytest.mark.services


def test_platform_bucket_exists(settings: Settings) -> None:
    names = {b["Name"] for b in s3_client(settings).list_buckets()["Buckets"]}
    assert settings.s3_bucket in names


def test_put_get_list_delete_round_trip(settings: Settings, unique_name: str) -> None:
    s3 = s3_client(settings)
    bucket = settings.s3_bucket
    payload = bytes(range(256)) * 4096  # 1 MiB of binary data
    for i in range(3):
        s3.put_object(Bucket=bucket, Key=f"{unique_name}/obj-{i}", Body=payload)
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=f"{unique_name}/")
    assert sorted(o["Key"] for o in listed["Contents"]) == [
        f"{unique_name}/obj-{i}" for i in range(3)
    ]
    assert s3.get_object(Bucket=bucket, Key=f"{unique_name}/obj-1")["Body"].read() == payload
    for i in range(3):
        s3.delete_object(Bucket=bucket, Key=f"{unique_name}/obj-{i}")
    assert s3.list_objects_v2(Bucket=bucket, Prefix=f"{unique_name}/")["KeyCount"] == 0
