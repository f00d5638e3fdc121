"""The Dagster code location loads, and runs land in the stack's Postgres."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from dagster import DagsterInstance, asset, materialize

from fennel_dagster.dagster_home import prepare_dagster_home
from fennel_dagster.settings import Settings

pytestmark = pytest.mark.services

REPO = Path(__file__).resolve().parents[2]


def test_workspace_yaml_definitions_validate(settings: Settings) -> None:
    env = {**os.environ, **prepare_dagster_home(settings)}
    dagster = Path(sys.executable).with_name("dagster")
    proc = subprocess.run(
        [str(dagster), "definitions", "validate", "-w", str(REPO / "workspace.yaml")],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_asset_materialises_into_the_postgres_backed_instance(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, unique_name: str
) -> None:
    for key, value in prepare_dagster_home(settings).items():
        monkeypatch.setenv(key, value)

    @asset(name=f"smoke_{unique_name}")
    def smoke() -> int:
        return 42

    with DagsterInstance.get() as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        result = materialize([smoke], instance=instance)
        assert result.success
        run_id = result.run_id
    with psycopg.connect(settings.pg_dsn(settings.dagster_pg_db)) as conn:
        row = conn.execute("SELECT status FROM runs WHERE run_id = %s", (run_id,)).fetchone()
    assert row == ("SUCCESS",)


def test_dagsters_own_commands_work_in_the_project_root_with_nothing_exported(
    settings: Settings, tmp_path: Path
) -> None:
    """A Dagster user's habit: `dagster dev` / `dg dev` in the project folder. Without
    DAGSTER_HOME, Dagster reads the root dagster.yaml for a temporary instance; its storage
    finds the stack's Postgres from fennel_dagster's settings, with nothing exported."""
    from dagster._core.instance.ref import InstanceRef

    env = {k: v for k, v in os.environ.items()
           if k not in ("DAGSTER_HOME", "FENNEL_DAGSTER_PG_URL")}  # fmt: skip
    env.update(settings.as_env())  # the settings as a settings file or FENNEL_* would give them
    dagster = Path(sys.executable).with_name("dagster")
    proc = subprocess.run(
        [str(dagster), "definitions", "validate", "-w", "workspace.yaml"],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # Dagster's own note that the command is superseded (by `dg check defs`, which needs a
    # dg project) is the only warning
    assert "Warning" not in proc.stderr.replace("SupersessionWarning", ""), proc.stderr
    # what those commands do without DAGSTER_HOME: a temporary home, the root's dagster.yaml
    with DagsterInstance.from_ref(InstanceRef.from_dir(str(tmp_path), config_dir=str(REPO))) as i:
        assert type(i.run_storage).__name__ == "PostgresRunStorage"
        assert settings.dagster_pg_db in str(getattr(i.run_storage, "postgres_url", ""))
