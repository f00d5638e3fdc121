"""Run Fennel's own documentation examples on fennel_dagster, with only their imports changed.

Why: the README promises that a Fennel feature repository moves here by changing its imports.
This script measures that promise on the largest body of Fennel code there is, the examples
under ``docs/examples`` of github.com/fennel-ai/client:

1. export the examples (plus the root ``conftest.py`` and the pytest markers of the root
   ``pytest.ini``/``pyproject.toml``) at one commit of a LOCAL clone, with ``git archive``;
2. rewrite every ``fennel...`` import to ``fennel_dagster`` with one fixed routing table
   (``ROUTES``), and nothing else: every other byte and every line number stays the same;
3. run each example file alone with pytest in the target interpreter, in parallel;
4. write ``results.md`` and ``tests.csv`` under ``--out``.

It fetches nothing from the network and copies no example into this repository: the export
lives under ``--out`` (a temporary directory by default). Its exit code is 0 whatever the pass
rate (it is a measurement) and 2 on bad arguments.

    python tools/fennel_compat.py --clone /path/to/fennel-client [--rev HEAD] [--jobs 2]

``--marker integration`` runs only the tests carrying that pytest marker (``-m``), and counts
only those as declared. ``--platform`` runs them in integration mode against a real
deployment on the local stack: it starts ``fennel-dagster engine`` and ``fennel-dagster
serve`` (their own metadata schema and topic namespace, an admin token), exports
``FENNEL_TEST_MODE=platform``, ``FENNEL_URL`` and ``FENNEL_TOKEN`` to every test file (each
``@mock`` test then gets the HTTP client on a fresh branch), runs the files one at a time,
then stops both and drops that platform (``--keep-platform`` leaves it).
"""

from __future__ import annotations

import argparse
import ast
import configparser
import contextlib
import csv
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
import urllib.request
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]

# Fennel module -> fennel_dagster modules; an imported name goes to the first that exports it.
ROUTES: dict[str, list[str]] = {
    "fennel": ["fennel_dagster", "fennel_dagster.aggregate", "fennel_dagster.lib"],
    "fennel.datasets": ["fennel_dagster", "fennel_dagster.aggregate"],
    "fennel.datasets.aggregate": ["fennel_dagster.aggregate"],
    "fennel.aggregate": ["fennel_dagster.aggregate"],
    "fennel.lib.aggregate": ["fennel_dagster.aggregate"],
    "fennel.featuresets": ["fennel_dagster"],
    "fennel.lib": ["fennel_dagster.lib"],
    "fennel.lib.params": ["fennel_dagster.lib"],
    "fennel.lib.metadata": ["fennel_dagster.lib"],
    "fennel.lib.includes": ["fennel_dagster.lib"],
    "fennel.lib.expectations": ["fennel_dagster.lib"],
    "fennel.lib.schema": ["fennel_dagster.lib", "fennel_dagster.dtypes"],
    "fennel.lib.window": ["fennel_dagster.window"],
    "fennel.dtypes": ["fennel_dagster.dtypes", "fennel_dagster.window"],
    "fennel.connectors": ["fennel_dagster.sources"],
    "fennel.connectors.connectors": ["fennel_dagster.sources"],
    "fennel.sources": ["fennel_dagster.sources"],
    "fennel.expr": ["fennel_dagster.expr"],
    "fennel.expr.expr": ["fennel_dagster.expr"],
    "fennel.testing": ["fennel_dagster.testing"],
    "fennel.client": ["fennel_dagster.client"],
}

# Printed by the target interpreter: what each candidate module exports (None if it fails).
EXPORTS_SCRIPT = """
import importlib, json, sys
out = {}
for name in sys.argv[1:]:
    try:
        out[name] = sorted(dir(importlib.import_module(name)))
    except Exception:
        out[name] = None
print(json.dumps(out))
"""

Exports = dict[str, set[str]]


class BadArguments(Exception):
    """A problem with the command line: reported on stderr, exit code 2."""


@dataclass
class TestResult:
    """One test's outcome as the report lists it."""

    test: str
    outcome: str  # passed | failed | error | skipped
    message: str = ""


@dataclass
class FileResult:
    """One example file: its declared tests and what pytest reported for them."""

    path: str
    declared: int
    tests: list[TestResult] = field(default_factory=list)

    @property
    def passed(self) -> int:
        return sum(t.outcome == "passed" for t in self.tests)

    @property
    def total(self) -> int:
        return max(self.declared, len(self.tests))

    @property
    def first_failure(self) -> str:
        bad = [t for t in self.tests if t.outcome in ("failed", "error")]
        return f"{bad[0].test}: {bad[0].message}" if bad else ""


# ---------------------------------------------------------------- git export


def git(clone: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    """Run git on the clone (a work tree or a bare git dir), never touching the network."""
    return subprocess.run(["git", "-C", str(clone), *args], capture_output=True, check=False)


def resolve_commit(clone: Path, rev: str) -> str:
    """The full commit id of ``rev``, so the report names exactly what was measured."""
    if git(clone, "rev-parse", "--git-dir").returncode != 0:
        raise BadArguments(f"{clone} is not a git repository")
    found = git(clone, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    if found.returncode != 0:
        raise BadArguments(f"{rev!r} is not a commit in {clone}")
    return found.stdout.decode().strip()


def export_examples(clone: Path, commit: str, examples: str, dest: Path) -> None:
    """Unpack the examples folder at ``commit`` into ``dest``, keeping the repo's layout."""
    archive = git(clone, "archive", "--format=tar", commit, "--", examples)
    if archive.returncode != 0:
        raise BadArguments(f"cannot export {examples!r} at {commit}: {archive.stderr.decode()}")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(dest, filter="data")


def read_blob(clone: Path, commit: str, path: str) -> str | None:
    """A file of the clone at ``commit``, or None when it is absent there."""
    shown = git(clone, "show", f"{commit}:{path}")
    return shown.stdout.decode() if shown.returncode == 0 else None


def upstream_markers(clone: Path, commit: str) -> list[str]:
    """The markers Fennel's pytest config declares; examples use them."""
    markers: list[str] = []
    ini = read_blob(clone, commit, "pytest.ini")
    if ini is not None:
        parser = configparser.ConfigParser(interpolation=None)
        parser.read_string(ini)
        raw = parser.get("pytest", "markers", fallback="")
        markers += [line.strip() for line in raw.splitlines() if line.strip()]
    pyproject = read_blob(clone, commit, "pyproject.toml")
    if pyproject is not None:
        options = tomllib.loads(pyproject).get("tool", {}).get("pytest", {})
        markers += list(options.get("ini_options", {}).get("markers", []))
    return markers


def export_root_config(clone: Path, commit: str, dest: Path) -> None:
    """Copy the root conftest.py and write a pytest.ini that pins the rootdir to ``dest``
    (so the root conftest applies) and declares upstream's markers."""
    conftest = read_blob(clone, commit, "conftest.py")
    if conftest is not None:
        (dest / "conftest.py").write_text(conftest)
    lines = ["[pytest]", "markers ="] + [f"    {m}" for m in upstream_markers(clone, commit)]
    (dest / "pytest.ini").write_text("\n".join(lines) + "\n")


# ---------------------------------------------------------------- import rewriting


def candidates(module: str) -> list[str]:
    """Where a Fennel module's names may live in fennel_dagster."""
    if module in ROUTES:
        return ROUTES[module]
    return ["fennel_dagster" + module.removeprefix("fennel")]


def is_fennel(module: str | None) -> bool:
    """Whether an import names Fennel's package (and not, say, ``fennel_dagster``)."""
    return module is not None and (module == "fennel" or module.startswith("fennel."))


def load_exports(python: str) -> Exports:
    """What each multi-candidate module exports, asked once of the target interpreter (names
    depend on the installed fennel_dagster, not on this script's environment)."""
    modules = sorted({m for targets in ROUTES.values() if len(targets) > 1 for m in targets})
    done = subprocess.run(
        [python, "-c", EXPORTS_SCRIPT, *modules], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise BadArguments(f"{python} cannot list fennel_dagster's modules: {done.stderr}")
    listed: dict[str, list[str] | None] = json.loads(done.stdout.strip().splitlines()[-1])
    return {name: set(names or ()) for name, names in listed.items()}


def route(name: str, targets: list[str], exports: Exports) -> str:
    """The first target module that exports ``name``; else the first (an honest ImportError)."""
    return next((t for t in targets if name in exports.get(t, set())), targets[0])


def alias_text(alias: ast.alias) -> str:
    """``name`` or ``name as other``, as written."""
    return alias.name if alias.asname is None else f"{alias.name} as {alias.asname}"


def from_import_groups(node: ast.ImportFrom, exports: Exports) -> list[tuple[str, list[str]]]:
    """``from fennel.x import a, b`` as (target module, names) groups, in first-use order."""
    targets = candidates(node.module or "")
    if any(a.name == "*" for a in node.names):  # every candidate, the first one winning
        return [(t, ["*"]) for t in reversed(targets)]
    groups: dict[str, list[str]] = {}
    for alias in node.names:
        groups.setdefault(route(alias.name, targets, exports), []).append(alias_text(alias))
    return list(groups.items())


def import_text(node: ast.Import | ast.ImportFrom, exports: Exports, extra_lines: int) -> str:
    """The replacement of one import statement, spanning the same number of lines."""
    if isinstance(node, ast.ImportFrom):
        groups = from_import_groups(node, exports)
        stmts = [f"from {target} import {', '.join(names)}" for target, names in groups]
        if extra_lines and groups[-1][1] != ["*"]:  # keep the line count inside parentheses
            target, names = groups[-1]
            stmts[-1] = f"from {target} import ({', '.join(names)}" + "\n" * extra_lines + ")"
            return "; ".join(stmts)
    else:
        stmts = [import_alias_text(alias) for alias in node.names]
    return "; ".join(stmts) + " \\\n" * extra_lines


def import_alias_text(alias: ast.alias) -> str:
    """``import fennel.x as y`` -> ``import <target> as y``; a bare ``import fennel`` keeps the
    name ``fennel`` bound (``import fennel_dagster as fennel``); Fennel's docs use neither."""
    if not is_fennel(alias.name):
        return f"import {alias_text(alias)}"
    target = candidates(alias.name)[0]
    if alias.asname is not None:
        return f"import {target} as {alias.asname}"
    return f"import {target}" if "." in alias.name else f"import {target} as fennel"


def fennel_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import of Fennel's package, at any depth (examples import inside functions)."""
    found: list[ast.Import | ast.ImportFrom] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and is_fennel(node.module):
            found.append(node)
        elif isinstance(node, ast.Import) and any(is_fennel(a.name) for a in node.names):
            found.append(node)
    return found


def rewrite_source(source: bytes, exports: Exports) -> bytes:
    """Replace each Fennel import statement's exact span; leave every other byte alone."""
    tree = ast.parse(source)
    starts = [0]
    for line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    out = source
    nodes = sorted(fennel_imports(tree), key=lambda n: (n.lineno, n.col_offset), reverse=True)
    for node in nodes:
        end_line = node.end_lineno or node.lineno
        begin = starts[node.lineno - 1] + node.col_offset  # ast offsets are UTF-8 bytes
        end = starts[end_line - 1] + (node.end_col_offset or 0)
        text = import_text(node, exports, end_line - node.lineno).encode()
        out = out[:begin] + text + out[end:]
    return out


def rewrite_tree(root: Path, exports: Exports) -> int:
    """Rewrite the imports of every .py file under ``root``; returns how many changed."""
    changed = 0
    for path in sorted(root.rglob("*.py")):
        source = path.read_bytes()
        try:
            new = rewrite_source(source, exports)
        except SyntaxError:
            continue  # pytest will report it, as it would upstream
        if new != source:
            path.write_bytes(new)
            changed += 1
    return changed


# ---------------------------------------------------------------- running


def is_test_class(cls: ast.ClassDef) -> bool:
    """Whether pytest collects a class: ``Test*``, or any ``unittest.TestCase`` subclass
    (Fennel's docs name some of those ``TesFoo``)."""
    bases = [ast.unparse(base) for base in cls.bases]
    return cls.name.startswith("Test") or any(b.endswith("TestCase") for b in bases)


def marked(node: ast.AST, marker: str) -> bool:
    """Whether a function or class carries ``@pytest.mark.<marker>`` (also called, as in
    ``@pytest.mark.<marker>(...)``), or a module ``pytestmark`` names it."""
    decorators = getattr(node, "decorator_list", [])
    if isinstance(node, ast.Assign):  # pytestmark = pytest.mark.x / [pytest.mark.x, ...]
        decorators = [node.value]
    for d in decorators:
        for sub in ast.walk(d):
            if isinstance(sub, ast.Attribute) and sub.attr == marker:
                inner = sub.value
                if isinstance(inner, ast.Attribute) and inner.attr == "mark":
                    return True
    return False


def declared_tests(path: Path, marker: str | None = None) -> list[str]:
    """The test functions a file declares (module level, or methods of test classes), only
    those carrying ``marker`` when given: they count as failed when the file cannot even be
    collected."""
    try:
        tree = ast.parse(path.read_bytes())
    except SyntaxError:
        return ["<syntax error>"]
    funcs = (ast.FunctionDef, ast.AsyncFunctionDef)
    whole = marker is None or any(
        marked(n, marker)
        for n in tree.body
        if isinstance(n, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in n.targets
        )
    )  # fmt: skip
    names = [n.name for n in tree.body
             if isinstance(n, funcs) and (whole or marked(n, marker or ""))]  # fmt: skip
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and is_test_class(n)):
        every = whole or marked(cls, marker or "")
        names += [f"{cls.name}::{n.name}" for n in cls.body
                  if isinstance(n, funcs) and (every or marked(n, marker or ""))]  # fmt: skip
    return [n for n in names if n.split("::")[-1].startswith("test")]


RUNNING: set[subprocess.Popen[bytes]] = set()  # pytest processes, ended on an interruption


def interrupted(signum: int, frame: object) -> None:
    """SIGTERM as Ctrl-C: the deployment's processes are stopped and its platform dropped."""
    raise KeyboardInterrupt


@dataclass(frozen=True)
class RunOptions:
    """How each file runs: the interpreter, a pytest marker expression, the environment."""

    python: str
    timeout: float
    marker: str | None = None
    env: dict[str, str] = field(default_factory=dict)


def run_pytest(opts: RunOptions, root: Path, rel: str, xml: Path, log: Path) -> str:
    """Run one file alone; returns '' or why there may be no report (timeout, crash)."""
    cmd = [opts.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}"]
    if opts.marker:
        cmd += ["-m", opts.marker]
    cmd.append(rel)
    env = {**test_env(os.environ), **opts.env, "PYTHONDONTWRITEBYTECODE": "1"}
    timeout = opts.timeout
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            cmd, cwd=root, stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        RUNNING.add(proc)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # pytest and anything it started
            proc.wait()
            return f"timeout after {timeout:g}s"
        finally:
            RUNNING.discard(proc)
    return "" if xml.exists() else f"pytest exited {code} without a report"


def error_line(element: ET.Element) -> str:
    """The first useful line of a failure: its message, else the traceback's first ``E`` line."""
    message = (element.get("message") or "").strip()
    text = element.text or ""
    e_lines = [ln[1:].strip() for ln in text.splitlines() if ln.startswith("E ")]
    if message and message != "collection failure":
        return message.splitlines()[0]
    return e_lines[0] if e_lines else (message or text.strip()[:200])


def parse_junit(xml: Path, rel: str) -> tuple[list[TestResult], str]:
    """Per-test outcomes, and the collection error if the file could not be collected."""
    module = rel.removesuffix(".py").replace("/", ".")
    results: list[TestResult] = []
    for case in ET.parse(xml).getroot().iter("testcase"):
        kinds = {child.tag: child for child in case}
        if not case.get("classname") and "error" in kinds:
            return [], error_line(kinds["error"])
        cls = (case.get("classname") or "").removeprefix(module).lstrip(".")
        name = f"{cls}::{case.get('name')}" if cls else str(case.get("name"))
        outcome, message = "passed", ""
        for tag, label in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
            if tag in kinds:
                outcome, message = label, error_line(kinds[tag])
                break
        results.append(TestResult(name, outcome, message))
    return results, ""


def test_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment without the integration-mode switches (``--platform`` sets them)."""
    return {k: v for k, v in environ.items() if k not in INTEGRATION_ENV}


def check_file(opts: RunOptions, root: Path, rel: str, out: Path) -> FileResult:
    """Run one example file and turn what happened into per-test results."""
    declared = declared_tests(root / rel, opts.marker)
    safe = rel.replace("/", "__")
    xml, log = out / "junit" / f"{safe}.xml", out / "logs" / f"{safe}.log"
    xml.unlink(missing_ok=True)
    problem = run_pytest(opts, root, rel, xml, log)
    tests: list[TestResult] = []
    if not problem:
        tests, problem = parse_junit(xml, rel)
    if problem:
        tests = [TestResult(name, "failed", problem) for name in declared]
    return FileResult(rel, len(declared), tests)


def example_files(
    root: Path, examples: str, only: str | None, marker: str | None = None
) -> list[str]:
    """Example files that declare tests (with ``marker``, if given; others have nothing to
    measure), as relative paths."""
    found = []
    for path in sorted((root / examples).rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if (only is None or any(o in rel for o in only.split(","))) and declared_tests(
            path, marker
        ):
            found.append(rel)
    return found


# ---------------------------------------------------------------- a deployment (--platform)

INTEGRATION_ENV = ("FENNEL_TEST_MODE", "USE_INT_CLIENT", "FENNEL_URL", "FENNEL_TOKEN")

# run by the target interpreter: every branch's physical assets, then the schema
DROP_SCRIPT = """
from fennel_dagster.client import LocalClient
from fennel_dagster.metadata.db import connect
from fennel_dagster.settings import get_settings
s = get_settings()
with LocalClient(s) as client:
    client.recover(wait=0)
    for branch in client.list_branches():
        client.delete_branch(branch, even_main=True)
with connect(s) as conn:
    conn.execute(f"DROP SCHEMA {s.pg_schema} CASCADE")
    conn.commit()
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stop_process(proc: subprocess.Popen[bytes], grace: float = 60.0) -> None:
    """SIGTERM (the engine snapshots and leaves its partitions), then SIGKILL its group."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


@contextlib.contextmanager
def deployment(python: str, out: Path, partitions: int, keep: bool) -> Iterator[dict[str, str]]:
    """An engine and a query server of a platform of their own on the local stack (a fresh
    metadata schema and topic namespace); yields the tests' integration environment."""
    name = f"compat{uuid.uuid4().hex[:8]}"
    env = {**test_env(os.environ), "FENNEL_PG_SCHEMA": name, "FENNEL_NAMESPACE": name,
           "FENNEL_PARTITIONS": str(partitions), "FENNEL_STATE_DIR": str(out / "state"),
           "FENNEL_ENGINE_POLL_INTERVAL_S": "0.5", "FENNEL_ENGINE_LEASE_S": "5"}  # fmt: skip
    cli = [python, "-m", "fennel_dagster.cli.main"]
    made = subprocess.run([*cli, "token", "create", "compat", "--scope", "admin"], env=env,
                          capture_output=True, text=True, check=False)  # fmt: skip
    if made.returncode != 0:
        raise BadArguments(f"cannot create a token (is the stack up?): {made.stderr[-2000:]}")
    token = made.stdout.split()[0]
    port = free_port()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for what, args in (("engine", ["engine", "--id", f"{name}-engine"]),
                           ("serve", ["serve", "--port", str(port), "--executors", "1"])):  # fmt: skip
            with (out / f"{what}.log").open("wb") as sink:
                procs.append(subprocess.Popen([*cli, *args], env=env, stdout=sink,
                                              stderr=subprocess.STDOUT, start_new_session=True))  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while not healthy(url):
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise BadArguments(f"the query server did not start; see {out / 'serve.log'}")
            time.sleep(0.5)
        yield {"FENNEL_TEST_MODE": "platform", "FENNEL_URL": url, "FENNEL_TOKEN": token}
    finally:
        for proc in reversed(procs):
            stop_process(proc)
        if not keep:
            subprocess.run([python, "-c", DROP_SCRIPT], env=env, check=False,
                           capture_output=True)  # fmt: skip


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as resp:  # noqa: S310 - ours
            return bool(resp.status == 200)
    except OSError:
        return False


# ---------------------------------------------------------------- report


def percent(part: int, whole: int) -> str:
    """A share as the report prints it."""
    return f"{100 * part / whole:.1f}%" if whole else "n/a"


def summary_line(commit: str, results: Sequence[FileResult]) -> str:
    """The one line printed to stdout and heading results.md."""
    declared = sum(r.declared for r in results)
    passed = sum(r.passed for r in results)
    clean = sum(r.passed == r.total for r in results)
    return (
        f"fennel docs examples @ {commit[:12]}: {passed}/{declared} declared tests passed "
        f"({percent(passed, declared)}); {clean}/{len(results)} files pass entirely"
    )


def md_cell(text: str) -> str:
    """Text safe inside one markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")[:160]


def write_markdown(out: Path, clone: Path, commit: str, results: Sequence[FileResult]) -> None:
    """results.md: the totals, then one row per file."""
    outcomes = [t.outcome for r in results for t in r.tests]
    counts = ", ".join(f"{k} {outcomes.count(k)}" for k in ("passed", "failed", "error", "skipped"))
    lines = [
        f"# {summary_line(commit, results)}",
        "",
        f"- commit: `{commit}` of `{clone}`",
        f"- files: {len(results)} example files with tests",
        f"- tests: {sum(r.declared for r in results)} declared, {len(outcomes)} reported ({counts})",
        f"- passed: {sum(r.passed for r in results)} "
        f"({percent(sum(r.passed for r in results), sum(r.declared for r in results))} of declared)",
        f"- files whose tests all pass: {sum(r.passed == r.total for r in results)}",
        "",
        "| file | passed/total | first failure |",
        "|---|---|---|",
    ]
    lines += [f"| {r.path} | {r.passed}/{r.total} | {md_cell(r.first_failure)} |" for r in results]
    (out / "results.md").write_text("\n".join(lines) + "\n")


def write_csv(out: Path, results: Iterable[FileResult]) -> None:
    """tests.csv: one row per test, for diffing two runs."""
    with (out / "tests.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["file", "test", "outcome", "message"])
        for r in results:
            writer.writerows([r.path, t.test, t.outcome, t.message] for t in r.tests)


# ---------------------------------------------------------------- CLI


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line (argparse itself exits 2 on malformed options)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--clone", type=Path, required=True, help="local git dir of fennel-ai/client"
    )
    parser.add_argument("--rev", default="HEAD")
    parser.add_argument("--examples", default="docs/examples", help="folder of the clone to run")
    parser.add_argument(
        "--only", help="run only files whose path contains this (or one of a,b,...)"
    )
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per file")
    parser.add_argument("--python", default=str(REPO_ROOT / ".venv" / "bin" / "python"))
    parser.add_argument("--marker", "-m", help="run only tests with this pytest marker")
    parser.add_argument("--platform", action="store_true",
                        help="integration mode: the tests' client is a real deployment's")  # fmt: skip
    parser.add_argument("--partitions", type=int, default=2, help="--platform: per job")
    parser.add_argument("--keep-platform", action="store_true",
                        help="--platform: leave its schema and topics behind")  # fmt: skip
    parser.add_argument(
        "--out", type=Path, default=Path(tempfile.gettempdir()) / "fennel_compat", help="report dir"
    )
    return parser.parse_args(argv)


def prepare(args: argparse.Namespace) -> tuple[str, Path]:
    """Validate the arguments, export and rewrite; returns the commit and the export root."""
    if args.jobs < 1 or args.timeout <= 0:
        raise BadArguments("--jobs and --timeout must be positive")
    if shutil.which(args.python) is None:
        raise BadArguments(f"no interpreter at {args.python}")
    commit = resolve_commit(args.clone, args.rev)
    root = args.out / "export"
    for sub in ("export", "junit", "logs"):  # only what this script writes: --out may be shared
        shutil.rmtree(args.out / sub, ignore_errors=True)
        (args.out / sub).mkdir(parents=True)
    export_examples(args.clone, commit, args.examples.strip("/"), root)
    export_root_config(args.clone, commit, root)
    rewrite_tree(root / args.examples.strip("/"), load_exports(args.python))
    return commit, root


def main(argv: Sequence[str] | None = None) -> int:
    """Export, rewrite, run, report; 0 whatever the pass rate, 2 on bad arguments."""
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, interrupted)
    try:
        commit, root = prepare(args)
    except BadArguments as exc:
        print(f"fennel_compat: {exc}", file=sys.stderr)
        return 2
    files = example_files(root, args.examples.strip("/"), args.only, args.marker)
    opts = RunOptions(args.python, args.timeout, args.marker)
    try:
        with contextlib.ExitStack() as stack:
            if args.platform:  # one deployment, the files one at a time
                shutil.rmtree(args.out / "state", ignore_errors=True)
                env = stack.enter_context(
                    deployment(args.python, args.out, args.partitions, args.keep_platform)
                )
                opts = RunOptions(args.python, args.timeout, args.marker, env)
            pool = ThreadPoolExecutor(max_workers=1 if args.platform else args.jobs)
            try:
                results = list(pool.map(lambda rel: check_file(opts, root, rel, args.out), files))
            finally:  # interrupted: no further file starts, the running ones end
                pool.shutdown(wait=False, cancel_futures=True)
                for proc in list(RUNNING):
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
    except BadArguments as exc:
        print(f"fennel_compat: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fennel_compat: interrupted; the deployment is stopped, no report", file=sys.stderr)
        return 130
    write_markdown(args.out, args.clone, commit, results)
    write_csv(args.out, results)
    print(summary_line(commit, results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
