"""The `fennel-dagster` command's error paths speak to the user."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fennel_dagster.settings import Settings
from fennel_dagster.stack.prereqs import require
from fennel_dagster.stack.process import StackError


def test_missing_prerequisite_names_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(StackError, match=r"`java` not found on PATH\. Install Java 17: apt-get"):
        require("java")


def test_status_of_a_stack_never_started_exits_nonzero_and_says_stopped(
    settings: Settings, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        **settings.with_(
            home=tmp_path, pg_port=settings.pg_port + 65, kafka_port=settings.kafka_port + 65
        ).as_env(),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "fennel_dagster.cli.main", "stack", "status", "postgres", "kafka"],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("postgres") and lines[0].rstrip().endswith("stopped")
    assert lines[1].startswith("kafka") and lines[1].rstrip().endswith("stopped")
