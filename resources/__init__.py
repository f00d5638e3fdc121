"""Dagster resources of fennel_dagster: the platform's services, from the shared settings.

Every resource reads ``fennel_dagster.settings`` (``FENNEL_*`` environment or settings
file); fields left empty keep the settings' value, so a deployment overrides only what it
must (e.g. ``MetadataStore(schema=EnvVar("FENNEL_PG_SCHEMA"))``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
from confluent_kafka.admin import AdminClient
from dagster import ConfigurableResource
from dagster_pyspark import LazyPySparkResource

from fennel_dagster.batch.spark import spark_conf
from fennel_dagster.engine.hangar import Hangar
from fennel_dagster.engine.runner import state_path
from fennel_dagster.metadata.db import connect
from fennel_dagster.s3 import s3_client
from fennel_dagster.settings import Settings, get_settings


class FennelSettings(ConfigurableResource):  # type: ignore[misc]
    """The platform settings, with optional overrides of the metadata schema and namespace."""

    pg_schema: str = ""
    namespace: str = ""

    def settings(self) -> Settings:
        s = get_settings()
        changes = {
            k: v for k, v in {"pg_schema": self.pg_schema, "namespace": self.namespace}.items() if v
        }
        return s.with_(**changes) if changes else s


class MetadataStore(ConfigurableResource):  # type: ignore[misc]
    """The platform's Postgres: asset bank, branches, job registry, commit requests."""

    schema_name: str = ""

    def connect(self, autocommit: bool = False) -> psycopg.Connection:
        s = get_settings()
        return connect(s, self.schema_name or s.pg_schema, autocommit=autocommit)


class KafkaResource(ConfigurableResource):  # type: ignore[misc]
    bootstrap_servers: str = ""

    def servers(self) -> str:
        return self.bootstrap_servers or get_settings().kafka_servers

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.servers()})


class S3Resource(ConfigurableResource):  # type: ignore[misc]
    """boto3 against the configured S3-compatible endpoint (snapshots, offline tables)."""

    bucket: str = ""

    def client(self) -> Any:
        return s3_client(get_settings())

    def bucket_name(self) -> str:
        return self.bucket or get_settings().s3_bucket


class HangarResource(ConfigurableResource):  # type: ignore[misc]
    """Where engine runners keep their RocksDB state (one directory per job partition)."""

    state_dir: str = ""

    def path(self) -> Path:
        return Path(self.state_dir) if self.state_dir else get_settings().state_path

    def open(self, owner: str, job: str, partition: int) -> Hangar:
        return Hangar(
            state_path(get_settings().with_(state_dir=self.path()), owner, job, partition)
        )


def spark_resource() -> LazyPySparkResource:
    """dagster-pyspark's resource with the platform's Spark configuration (jars, S3A, master);
    the lazy one, so a run that needs no Spark (most commits) does not start a JVM."""
    return LazyPySparkResource(spark_config=spark_conf(get_settings()))


def resources() -> dict[str, Any]:
    return {
        "fennel": FennelSettings(),
        "metadata": MetadataStore(),
        "kafka": KafkaResource(),
        "s3": S3Resource(),
        "hangar": HangarResource(),
        "pyspark": spark_resource(),
    }
