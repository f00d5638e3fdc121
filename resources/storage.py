"""The Dagster instance's storage on the platform's Postgres, located by fennel_dagster's
settings (``FENNEL_*`` or ``fennel.toml``), the place every other part reads them from.

dagster-postgres' own storage takes its URL from ``dagster.yaml`` (a literal or an
environment variable), so Dagster's standard commands (``dagster dev``, ``dg dev``) failed
in the project folder unless ``fennel-dagster`` had exported the URL first. This class is
that storage, with the URL resolved when the instance loads instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dagster import Field
from dagster._serdes import ConfigurableClassData
from dagster_postgres import DagsterPostgresStorage

from fennel_dagster.settings import get_settings


class FennelPostgresStorage(DagsterPostgresStorage):  # type: ignore[misc]
    """``storage: custom: {module: resources.storage, class: FennelPostgresStorage}``."""

    @classmethod
    def config_type(cls) -> dict[str, Field]:
        return {
            "should_autocreate_tables": Field(bool, is_required=False, default_value=True),
        }

    @classmethod
    def from_config_value(  # type: ignore[override]
        cls, inst_data: ConfigurableClassData | None, config_value: Mapping[str, Any]
    ) -> FennelPostgresStorage:
        return cls(
            postgres_url=get_settings().dagster_pg_url,
            should_autocreate_tables=config_value.get("should_autocreate_tables", True),
            inst_data=inst_data,
        )
