"""The S3 client the runtime uses (snapshots, S3 prefixes, offline tables): boto3 against the
configured endpoint, a real S3 or the local stack's S3-compatible server alike."""

from __future__ import annotations

from typing import Any

import boto3
from botocore.config import Config

from fennel_dagster.settings import Settings


def s3_client(settings: Settings) -> Any:
    """A boto3 S3 client for the configured endpoint (path-style, as S3Proxy expects)."""
    return boto3.client(
        "s3",
        endpoint_url=settings.s3_url,
        aws_access_key_id=settings.s3_access_key,
        aws_secret_access_key=settings.s3_secret_key,
        region_name=settings.s3_region,
        config=Config(
            s3={"addressing_style": "path"},
            retries={"max_attempts": 3, "mode": "standard"},
            # S3-compatible servers (S3Proxy among them) reject the newer default CRC headers.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
            connect_timeout=3,
            read_timeout=30,
        ),
    )
