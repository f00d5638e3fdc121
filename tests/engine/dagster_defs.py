"""A code location with only the engine's Dagster parts, for the engine-run tests."""

from dagster import Definitions

from resources import FennelSettings
from sensors.engine import engine_keepalive, engine_partition_run

defs = Definitions(
    jobs=[engine_partition_run], sensors=[engine_keepalive], resources={"fennel": FennelSettings()}
)
