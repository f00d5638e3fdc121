"""The Dagster code location of fennel_dagster (loaded by workspace.yaml).

Reads what is committed (Postgres) and turns it into assets and checks; adds the commit job
and sensor, the engine's per-partition job and keep-alive sensor, the offline query job and
sensor, and stream observations.
A commit run reloads this location, so new assets appear without a restart.
"""

import logging

from dagster import AssetsDefinition, AssetSpec, Definitions, in_process_executor

from assets.commit_job import fennel_commit
from assets.datasets import branch_assets, expectation_checks, source_specs
from assets.offline import offline_assets
from assets.offline_queries import fennel_offline_query
from fennel_dagster.commit import catalog
from fennel_dagster.metadata.db import connect
from fennel_dagster.metadata.migrate import migrate
from fennel_dagster.settings import get_settings
from resources import resources
from sensors.commit import commit_requests
from sensors.engine import engine_keepalive, engine_partition_run
from sensors.health import query_health, stream_health
from sensors.offline_queries import offline_query_requests

log = logging.getLogger("fennel_dagster.assets")


def committed_assets() -> tuple[list, list]:  # type: ignore[type-arg]
    s = get_settings()
    try:
        with connect(s, s.pg_schema) as conn:
            migrate(conn)
            cats = catalog.load(conn)
    except Exception as e:  # noqa: BLE001 - the UI must load even when Postgres is down
        log.warning("fennel_dagster: no committed definitions loaded: %s", e)
        return [], []
    assets: list[AssetsDefinition | AssetSpec] = [
        a for a in (branch_assets(c) for c in cats) if a is not None
    ]
    assets += [a for c in cats for a in offline_assets(c)]
    assets += [spec for c in cats for spec in source_specs(c)]  # external: no runs
    checks = [chk for c in cats for chk in expectation_checks(c)]
    return assets, checks


def build_definitions() -> Definitions:
    assets, checks = committed_assets()
    return Definitions(
        assets=assets,
        asset_checks=checks,
        jobs=[fennel_commit, engine_partition_run, fennel_offline_query],
        sensors=[
            commit_requests,
            engine_keepalive,
            stream_health,
            query_health,
            offline_query_requests,
        ],
        resources=resources(),
        # Dagster's default executor starts a process per step, and each loads this code
        # location again (about 10 s of CPU: dagster, pandas, the library) after the run's
        # own process already has. In process, a run loads it once. (The engine's job names
        # the same executor itself: its runner must die with the run's process.)
        executor=in_process_executor,
    )


defs = build_definitions()
