"""DAGSTER_HOME for the local stack: our dagster.yaml plus the environment it reads."""

from __future__ import annotations

import os
import shutil
from importlib import resources
from pathlib import Path

from fennel_dagster.settings import Settings

LAUNCH_DEADLINE_S = 180  # Dagster's gRPC deadline for the processes we start (its default: 60)
_REPO_YAML = Path(__file__).resolve().parent.parent / "dagster.yaml"
# while `fennel-dagster dev` stops, this file in DAGSTER_HOME holds its pid: the engine
# keep-alive launches nothing then (it would replace the queued runs the stop cancels)
STOPPING_FILE = "fennel-dev-stopping"


def dagster_yaml_source() -> Path:
    """The project's dagster.yaml (repo root in a checkout, package data when installed)."""
    if _REPO_YAML.exists():
        return _REPO_YAML
    return Path(str(resources.files("fennel_dagster").joinpath("dagster.yaml")))


def prepare_dagster_home(settings: Settings) -> dict[str, str]:
    """Create DAGSTER_HOME with our dagster.yaml; returns the env vars a Dagster process needs
    (its storage finds Postgres from the settings themselves: ``resources.storage``)."""
    home = settings.dagster_home_path
    home.mkdir(parents=True, exist_ok=True)
    (home / STOPPING_FILE).unlink(missing_ok=True)  # a new session: launches are welcome
    shutil.copyfile(dagster_yaml_source(), home / "dagster.yaml")
    # Launching a run waits for its worker to load the code; with tens of engine runs
    # spawning at once on a few cores that outlasts Dagster's 60 s gRPC deadline
    timeout = os.environ.get("DAGSTER_GRPC_TIMEOUT_SECONDS", str(LAUNCH_DEADLINE_S))
    return {"DAGSTER_HOME": str(home), "DAGSTER_GRPC_TIMEOUT_SECONDS": timeout}


def mark_stopping(home: str | Path, pid: int) -> None:
    """Say that the session of process ``pid`` on this Dagster home is stopping."""
    (Path(home) / STOPPING_FILE).write_text(str(pid))


def stopping(home: str | Path) -> bool:
    """Whether a session on this Dagster home is stopping. A mark left by a session that
    died (SIGKILL) says nothing: its process is gone, and a `dg dev` started by hand after
    it must keep its engine alive."""
    try:
        pid = int((Path(home) / STOPPING_FILE).read_text().strip())
    except (OSError, ValueError):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, under another user
        return True
    return True
