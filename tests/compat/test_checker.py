"""tools/fennel_compat.py on a tiny git repo laid out like Fennel's (docs/examples, a root
conftest.py, markers in pyproject.toml): imports rewritten and nothing else, tests counted."""

from __future__ import annotations

import ast
import csv
import os
import subprocess
import sys
from pathlib import Path

CHECKER = Path(__file__).resolve().parents[2] / "tools" / "fennel_compat.py"

OK_EXAMPLE = """\
from datetime import datetime

import pandas as pd
from fennel.datasets import dataset, field
from fennel.testing import mock

__owner__ = "docs@example.com"


@mock
def test_commit_and_log(client):
    from fennel.connectors import Webhook, source  # nested, as Fennel's docs do

    webhook = Webhook(name="fennel_webhook")

    @source(webhook.endpoint("User"), disorder="14d", cdc="upsert")
    @dataset(index=True)
    class User:
        uid: int = field(key=True)
        age: int
        ts: datetime

    client.commit(message="users", datasets=[User])
    rows = pd.DataFrame({"uid": [1], "age": [30], "ts": [datetime(2024, 1, 1)]})
    assert client.log("fennel_webhook", "User", rows).status_code == 200
"""

BAD_EXAMPLE = """\
import pytest
from fennel.datasets import (
    Count,
    dataset,
)
from fennel.lib import inputs, meta


@pytest.mark.slow_docs
def test_names_resolve(greeting):  # greeting: a fixture of the root conftest.py
    assert greeting == "hello"
    assert Count.__module__.startswith("fennel_dagster")
    assert all(f.__module__.startswith("fennel_dagster") for f in (dataset, inputs, meta))


def test_drifted():
    assert 1 + 1 == 3, "docs example drifted"
"""

CONFTEST = """\
import pytest


@pytest.fixture
def greeting():
    return "hello"
"""

PYPROJECT = """\
[tool.pytest.ini_options]
markers = ["slow_docs: a marker only upstream's config declares"]
"""


def git(repo: Path, *args: str) -> None:
    identity = ["-c", "user.name=compat", "-c", "user.email=compat@example.com"]
    subprocess.run(["git", *identity, "-C", str(repo), *args], check=True, capture_output=True)


def fennel_like_repo(root: Path) -> Path:
    examples = root / "docs" / "examples"
    examples.mkdir(parents=True)
    (examples / "ok.py").write_text(OK_EXAMPLE)
    (examples / "bad.py").write_text(BAD_EXAMPLE)
    (root / "conftest.py").write_text(CONFTEST)
    (root / "pyproject.toml").write_text(PYPROJECT)
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "examples")
    return root


def run_checker(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHECKER), *args],
        capture_output=True,
        text=True,
        timeout=55,
        env=env,
        check=False,
    )


def fennel_import_lines(source: str) -> set[int]:
    """Line numbers (1-based) that a `fennel...` import statement spans."""
    lines: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "fennel":
            lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return lines


def imported_modules(source: str) -> set[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            modules.add(node.module or "")
        elif isinstance(node, ast.Import):
            modules.update(a.name for a in node.names)
    return modules


def test_checker_rewrites_only_imports_runs_each_file_and_reports(tmp_path: Path) -> None:
    repo = fennel_like_repo(tmp_path / "client")
    out = tmp_path / "out"
    done = run_checker("--clone", str(repo), "--out", str(out), "--python", sys.executable)
    assert done.returncode == 0, done.stderr
    assert "2/3 declared tests passed" in done.stdout

    for name, original in (("ok.py", OK_EXAMPLE), ("bad.py", BAD_EXAMPLE)):
        rewritten = (out / "export" / "docs" / "examples" / name).read_text()
        assert not any(m.split(".")[0] == "fennel" for m in imported_modules(rewritten))
        assert any(m.startswith("fennel_dagster") for m in imported_modules(rewritten))
        old, new = original.splitlines(), rewritten.splitlines()
        assert len(old) == len(new)
        imports = fennel_import_lines(original)
        assert imports  # the examples do import Fennel
        for number, (before, after) in enumerate(zip(old, new, strict=True), start=1):
            if number not in imports:
                assert before == after, f"{name}:{number} changed"
    bad = (out / "export" / "docs" / "examples" / "bad.py").read_text()
    # routing splits one Fennel import over two fennel_dagster modules, on the same line
    split = "from fennel_dagster.aggregate import Count; from fennel_dagster import (dataset"
    assert bad.splitlines()[1] == split
    assert "slow_docs" in (out / "export" / "pytest.ini").read_text()

    report = (out / "results.md").read_text()
    assert "2/3 declared tests passed" in report
    assert "| docs/examples/ok.py | 1/1 |" in report
    assert "| docs/examples/bad.py | 1/2 | test_drifted: AssertionError: docs example drifted" in (
        report
    )
    with (out / "tests.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 3
    failed = [r for r in rows if r["outcome"] != "passed"]
    assert [(r["file"], r["test"], r["outcome"]) for r in failed] == [
        ("docs/examples/bad.py", "test_drifted", "failed")
    ]
    assert "docs example drifted" in failed[0]["message"]


def test_checker_exits_2_when_the_clone_is_not_a_git_repo(tmp_path: Path) -> None:
    plain = tmp_path / "not_a_repo"
    plain.mkdir()
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(tmp_path)}
    args = ["--clone", str(plain), "--out", str(tmp_path / "out"), "--python", sys.executable]
    done = run_checker(*args, env=env)
    assert done.returncode == 2
    assert "not a git repository" in done.stderr
    assert not (tmp_path / "out" / "results.md").exists()


def test_marker_runs_and_counts_only_the_marked_tests(tmp_path: Path) -> None:
    repo = fennel_like_repo(tmp_path / "client")
    out = tmp_path / "out"
    args = ["--clone", str(repo), "--out", str(out), "--python", sys.executable]
    done = run_checker(*args, "--marker", "slow_docs")
    assert done.returncode == 0, done.stderr
    assert "1/1 declared tests passed" in done.stdout  # ok.py has none: not run at all
    with (out / "tests.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["file"], r["test"], r["outcome"]) for r in rows] == [
        ("docs/examples/bad.py", "test_names_resolve", "passed")
    ]
