"""One settings object for every component, read from ``FENNEL_*`` variables and a file.

Defaults point at the local stack started by ``fennel-dagster stack up``: every service on
loopback, on ports chosen not to collide with system services, with all data under one
project-owned directory. Nothing else in the code base names a host or a port.

Precedence: explicit keyword arguments > environment (``FENNEL_KAFKA_BOOTSTRAP=...``) >
the settings file (``FENNEL_SETTINGS_FILE``, default ``fennel.env`` in the working
directory, in dotenv syntax) > the defaults below.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="FENNEL_",
        env_file=os.environ.get("FENNEL_SETTINGS_FILE", "fennel.env"),
        env_file_encoding="utf-8",
        extra="ignore",
    )

    home: Path = Field(default=Path(".fennel"), description="data directory of the local stack")
    host: str = Field(default="127.0.0.1", description="loopback address the stack binds")

    # PostgreSQL: platform metadata and Dagster storage
    pg_host: str | None = None
    pg_port: int = 55432
    pg_user: str = "fennel"
    pg_password: str = ""
    pg_db: str = "fennel"
    dagster_pg_db: str = "dagster"
    pg_schema: str = "fennel"  # schema of the platform's metadata tables

    # Kafka
    kafka_bootstrap: str | None = None
    kafka_port: int = 59092
    kafka_controller_port: int = 59093

    # S3-compatible object store (None endpoint: local directory store)
    s3_endpoint: str | None = None
    s3_port: int = 59000
    s3_bucket: str = "fennel"
    s3_access_key: str = "fennel"
    s3_secret_key: str = "fennel-secret"
    s3_region: str = "us-east-1"
    s3_embedded: bool = Field(
        default=False,
        description="use a local directory instead of an S3 server even when one runs",
    )

    # Engine state and Spark
    state_dir: Path | None = None
    spark_master: str = "local[*]"
    spark_jars_dir: Path | None = None

    # Dagster
    dagster_home: Path | None = None
    dagster_port: int = 3000

    # Physical names of the platform's assets start with this (a Kafka-topic-safe prefix)
    namespace: str = "fd"

    # ------------------------------------------------------------------ derived endpoints

    @property
    def home_dir(self) -> Path:
        return self.home.resolve()

    @property
    def postgres_host(self) -> str:
        return self.pg_host or self.host

    def pg_dsn(self, db: str | None = None) -> str:
        """A libpq/psycopg DSN for ``db`` (default: the platform database)."""
        dsn = (
            f"host={self.postgres_host} port={self.pg_port} "
            f"user={self.pg_user} dbname={db or self.pg_db}"
        )
        return dsn + (f" password={self.pg_password}" if self.pg_password else "")

    def pg_url(self, db: str | None = None) -> str:
        """A SQLAlchemy URL (psycopg2 scheme, which dagster-postgres expects)."""
        auth = self.pg_user + (f":{self.pg_password}" if self.pg_password else "")
        return (
            f"postgresql+psycopg2://{auth}@{self.postgres_host}:{self.pg_port}/{db or self.pg_db}"
        )

    @property
    def kafka_servers(self) -> str:
        return self.kafka_bootstrap or f"{self.host}:{self.kafka_port}"

    @property
    def s3_url(self) -> str | None:
        """The S3 endpoint to use, or None for the local-directory store."""
        if self.s3_embedded:
            return None
        return self.s3_endpoint or f"http://{self.host}:{self.s3_port}"

    @property
    def local_object_dir(self) -> Path:
        """Where snapshots go when no S3 endpoint is used."""
        return self.home_dir / "objects"

    @property
    def state_path(self) -> Path:
        return (self.state_dir or self.home_dir / "state").resolve()

    @property
    def spark_jars_path(self) -> Path:
        return (self.spark_jars_dir or self.home_dir / "jars" / "spark").resolve()

    @property
    def dagster_home_path(self) -> Path:
        return (self.dagster_home or self.home_dir / "dagster").resolve()

    @property
    def dagster_url(self) -> str:
        return f"http://{self.host}:{self.dagster_port}"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings (tests that change the environment call ``cache_clear``)."""
    return Settings()
