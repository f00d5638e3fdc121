"""The `fennel-dagster` command's error paths speak to the user."""

from __future__ import annotations

import json
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


def _cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **settings.as_env()}
    return subprocess.run(
        [sys.executable, "-m", "fennel_dagster.cli.main", *args],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip


@pytest.mark.services
def test_status_of_the_live_stack_exits_zero_with_one_up_line_per_service(
    live_stack: Settings,
) -> None:
    proc = _cli(live_stack, "stack", "status")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert [ln.split()[0] for ln in lines] == ["postgres", "kafka", "s3", "registry", "spark"]
    assert all(ln.split()[1] == "up" for ln in lines)
    assert f"127.0.0.1:{live_stack.pg_port}" in lines[0]


@pytest.mark.services
def test_up_through_the_cli_reports_each_running_service_as_already_running(
    live_stack: Settings,
) -> None:
    proc = _cli(live_stack, "stack", "up", "postgres", "s3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("already running") == 2


@pytest.mark.services
def test_logs_prints_the_tail_of_a_service_log(live_stack: Settings) -> None:
    proc = _cli(live_stack, "stack", "logs", "postgres", "-n", "3")
    assert proc.returncode == 0, proc.stderr
    assert 0 < len(proc.stdout.splitlines()) <= 3


def test_unknown_service_is_refused_with_the_known_names(settings: Settings) -> None:
    proc = _cli(settings, "stack", "status", "redis")
    assert proc.returncode == 2
    assert (
        "unknown service(s) ['redis']; known: postgres, kafka, s3, registry, spark" in proc.stderr
    )


def test_settings_command_prints_exports_a_shell_can_eval_and_json(
    settings: Settings, tmp_path: Path
) -> None:
    custom = settings.with_(home=tmp_path, kafka_port=61234)
    exports = _cli(custom, "settings")
    assert exports.returncode == 0, exports.stderr
    assert "export FENNEL_KAFKA_PORT=61234" in exports.stdout.splitlines()
    shell = subprocess.run(
        ["bash", "-c", exports.stdout + "\necho $FENNEL_HOME"],
        capture_output=True, text=True, env={"PATH": os.environ["PATH"]},
    )  # fmt: skip
    assert shell.stdout.strip() == str(tmp_path)
    as_json = json.loads(_cli(custom, "settings", "--json").stdout)
    assert as_json["kafka_servers"] == f"{custom.host}:61234"
    assert as_json["dagster_pg_url"] == custom.dagster_pg_url
