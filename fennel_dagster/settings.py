"""One settings object for every component, read from ``FENNEL_*`` variables and a file.

Defaults point at the local stack started by ``fennel-dagster stack up``: every service on
loopback, on ports chosen not to collide with system services, with all data under one
project-owned directory (``.fennel/`` in the project root). Nothing else in the code base
names a host or a port.

Precedence: explicit keyword arguments > environment (``FENNEL_KAFKA_BOOTSTRAP=...``) >
the settings file > the defaults below. The settings file is ``FENNEL_SETTINGS_FILE`` if
set, else ``fennel.toml`` or ``fennel.env`` in the project root when present. A ``.toml``
file holds the field names as keys (``pg_port = 55432``); any other file is dotenv syntax
with the prefixed names (``FENNEL_PG_PORT=55432``).
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import Field
from pydantic_settings import (
    BaseSettings,
    DotEnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

ENV_PREFIX = "FENNEL_"


def project_root(start: Path | None = None) -> Path:
    """The nearest directory at or above ``start`` (default: cwd) holding ``workspace.yaml``
    and ``dagster.yaml``: the project's checkout. Falls back to ``start`` itself."""
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / "workspace.yaml").is_file() and (d / "dagster.yaml").is_file():
            return d
    return here


def settings_file() -> Path | None:
    """The settings file in effect, or None."""
    named = os.environ.get(f"{ENV_PREFIX}SETTINGS_FILE")
    if named:
        path = Path(named).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"{ENV_PREFIX}SETTINGS_FILE={named} does not exist")
        return path
    root = project_root()
    for name in ("fennel.toml", "fennel.env"):
        if (root / name).is_file():
            return root / name
    return None


RocksCompression = Literal["none", "snappy", "lz4", "zstd"]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    home: Path = Field(
        default_factory=lambda: project_root() / ".fennel",
        description="data directory of the local stack (FENNEL_HOME)",
    )
    host: str = Field(default="127.0.0.1", description="loopback address the stack binds")

    # PostgreSQL: platform metadata and Dagster storage
    pg_host: str | None = None  # default: `host`
    pg_port: int = 55432
    pg_user: str = "fennel"
    pg_password: str = ""
    pg_db: str = "fennel"
    dagster_pg_db: str = "dagster"
    pg_schema: str = "fennel"  # schema of the platform's metadata tables

    # Kafka (KRaft, one node: broker + controller)
    kafka_bootstrap: str | None = None  # default: `host:kafka_port`
    kafka_port: int = 59092
    kafka_controller_port: int = 59093

    # S3-compatible object store (None endpoint: the local S3 server on `s3_port`)
    s3_endpoint: str | None = None
    s3_port: int = 59000
    s3_bucket: str = "fennel"
    s3_access_key: str = "fennel"
    s3_secret_key: str = "fennel-secret"
    s3_region: str = "us-east-1"
    s3_embedded: bool = Field(
        default=False,
        description="use a local directory (home/objects) instead of an S3 server",
    )

    # Schema registry (Confluent's REST API; the local stack runs Apicurio Registry's
    # Confluent-compatible one): Avro and Protobuf sources name it in their format
    registry_port: int = 58081
    registry_auth: str | None = Field(
        default=None,
        description="'user:password' for a schema registry's basic auth (the IR never holds it)",
    )

    # Engine state and Spark
    state_dir: Path | None = None  # default: home/state
    # Engine runners: freshness vs throughput, snapshots, and the fleet's lease
    engine_batch_size: int = 5000  # max messages in one transaction
    # RocksDB of each job partition's state (engine/rocks_tuning.py): a cache per partition
    engine_rocksdb_block_cache_mb: int = Field(default=32, ge=0)
    engine_rocksdb_write_buffer_mb: int = Field(default=64, ge=1)
    engine_rocksdb_compression: RocksCompression = "snappy"
    engine_rocksdb_bloom_bits_per_key: int = Field(default=0, ge=0)
    engine_txn_interval_ms: int = 20  # how long a batch fills after its first message
    # how long the broker holds a runner's fetch that finds nothing new (a long poll: data
    # arriving answers it at once); short, the idle consumers of every runner fetch often
    engine_fetch_wait_ms: int = Field(default=10, ge=0)
    engine_snapshot_interval_s: float = 30.0
    engine_snapshots_kept: int = 3
    engine_poll_interval_s: float = 2.0  # supervisor: job registry / fleet poll period
    engine_lease_s: float = 10.0  # an engine silent this long loses its partitions
    engine_port: int = 0  # lookup endpoint (0: any free port)
    # offline-table and sink writers share a runner process, this many at most (sharing.py)
    engine_writers_per_process: int = Field(default=8, ge=1)
    # stream partitions (sources, pipelines, indexes) a runner process holds, one partition of
    # each job at most (sharing.py); 1 gives each its own process; None: about two stream
    # processes a core, one a partition when the engine owns no more than that
    engine_streams_per_process: int | None = Field(default=None, ge=1)
    # run a source partition and the same partition of a pipeline that streams its dataset as
    # one chain (one thread, one transaction a batch: engine/chaining.py) where the engine
    # owns both; False runs every partition alone
    engine_fuse_sources: bool = True
    offline_flush_s: float = 2.0  # offline writers: a Delta commit at most this often per table
    spark_master: str = "local[*]"
    spark_jars_dir: Path | None = None  # default: home/jars/spark

    # Query servers (`fennel-dagster serve`)
    serve_port: int = 58080
    serve_stats_interval_s: float = 10.0  # per-featureset request stats to the metadata store

    # Dagster
    dagster_home: Path | None = None  # default: home/dagster
    dagster_port: int = 3000
    dagster_engine: bool = True  # the keep-alive sensor runs the engine as Dagster runs

    # Physical names of the platform's assets start with this (a Kafka-topic-safe prefix)
    namespace: str = "fd"
    # Partitions of every dataset topic and job compiled from now on (co-partitioning)
    partitions: int = 4

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        path = settings_file()
        if path is not None and path.suffix == ".toml":
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=path))
        elif path is not None:
            sources.append(DotEnvSettingsSource(settings_cls, env_file=path))
        return tuple(sources)

    # ------------------------------------------------------------------ directories

    @property
    def home_dir(self) -> Path:
        return self.home.expanduser().resolve()

    @property
    def run_dir(self) -> Path:
        """PID files and markers of the local stack."""
        return self.home_dir / "run"

    @property
    def logs_dir(self) -> Path:
        return self.home_dir / "logs"

    @property
    def jars_dir(self) -> Path:
        """Maven-fetched jars, one sub-directory per component."""
        return self.home_dir / "jars"

    @property
    def state_path(self) -> Path:
        """RocksDB state of engine runners."""
        return (self.state_dir or self.home_dir / "state").expanduser().resolve()

    @property
    def spark_jars_path(self) -> Path:
        return (self.spark_jars_dir or self.jars_dir / "spark").expanduser().resolve()

    @property
    def dagster_home_path(self) -> Path:
        return (self.dagster_home or self.home_dir / "dagster").expanduser().resolve()

    @property
    def local_object_dir(self) -> Path:
        """Where snapshots go when no S3 endpoint is used (``s3_embedded``)."""
        return self.home_dir / "objects"

    # ------------------------------------------------------------------ endpoints

    @property
    def serve_url(self) -> str:
        """The local query server (``fennel-dagster serve``)."""
        return f"http://{self.host}:{self.serve_port}"

    @property
    def registry_url(self) -> str:
        """The local schema registry's Confluent-compatible API, as sources name it."""
        return f"http://{self.host}:{self.registry_port}/apis/ccompat/v7"

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
    def platform_pg_dsn(self) -> str:
        """psycopg DSN of the platform database (asset bank, ledgers, job registry)."""
        return self.pg_dsn(self.pg_db)

    @property
    def platform_pg_url(self) -> str:
        return self.pg_url(self.pg_db)

    @property
    def dagster_pg_dsn(self) -> str:
        """psycopg DSN of Dagster's storage database."""
        return self.pg_dsn(self.dagster_pg_db)

    @property
    def dagster_pg_url(self) -> str:
        return self.pg_url(self.dagster_pg_db)

    @property
    def kafka_servers(self) -> str:
        """Kafka ``bootstrap.servers``."""
        return self.kafka_bootstrap or f"{self.host}:{self.kafka_port}"

    @property
    def s3_url(self) -> str | None:
        """The S3 endpoint to use, or None for the local-directory store."""
        if self.s3_embedded:
            return None
        return self.s3_endpoint or f"http://{self.host}:{self.s3_port}"

    @property
    def dagster_url(self) -> str:
        """The Dagster UI (and GraphQL API at ``/graphql``)."""
        return f"http://{self.host}:{self.dagster_port}"

    # ------------------------------------------------------------------ hand-over

    def as_env(self) -> dict[str, str]:
        """These settings as ``FENNEL_*`` variables, for child processes (Dagster, Spark)."""
        out: dict[str, str] = {}
        for name, value in self.model_dump().items():
            if value is None:
                continue
            if isinstance(value, bool):
                value = str(value).lower()
            if isinstance(value, Path):
                value = value.expanduser().resolve()
            out[f"{ENV_PREFIX}{name.upper()}"] = str(value)
        return out

    def with_(self, **changes: Any) -> Settings:
        """A validated copy with some fields changed (e.g. a throwaway home and port)."""
        return type(self).model_validate({**self.model_dump(), **changes})


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings (tests that change the environment call ``cache_clear``)."""
    return Settings()
