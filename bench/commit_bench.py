"""Commit-protocol timings against the local stack (real Kafka, Postgres, S3).

    .venv/bin/python -m bench.commit_bench [--repeat 3]

Measures, in a throwaway metadata schema and topic namespace: committing the example repo
(create), committing it again (no-op), a version bump of UserSpend, and cloning a branch that
references 100 datasets. Prints a Markdown table (also written to bench/results/commit.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
import uuid
from datetime import datetime
from pathlib import Path

from examples.payments import DATASETS, FEATURESETS
from fennel_dagster import commit_spec, dataset, meta, source
from fennel_dagster.client import LocalClient
from fennel_dagster.metadata.db import connect
from fennel_dagster.settings import Settings
from fennel_dagster.sources import Webhook


def many_datasets(n: int) -> list[type]:
    hook = Webhook(name="bench")
    out = []
    for i in range(n):
        body = {"__annotations__": {"uid": int, "value": float, "ts": datetime}}
        cls = type(f"Bench{i:03d}", (), body)
        out.append(
            meta(owner="bench@example.com")(
                source(hook.endpoint(f"e{i}"))(dataset(offline=False)(cls))
            )
        )
    return out


def timed(fn) -> float:  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def run_once() -> dict[str, float]:
    schema = f"bench{uuid.uuid4().hex[:8]}"
    settings = Settings(pg_schema=schema, namespace=schema)
    results: dict[str, float] = {}
    with LocalClient(settings) as client:
        first = commit_spec("v1", DATASETS, FEATURESETS)
        results["example: create"] = timed(lambda: client.commit_spec(first))
        results["example: no-op"] = timed(
            lambda: client.commit_spec(dataclasses.replace(first, message="again"))
        )
        bumped = dataclasses.replace(
            first,
            message="bump",
            datasets=tuple(
                dataclasses.replace(d, version=d.version + 1) if d.name == "UserSpend" else d
                for d in first.datasets
            ),
        )
        results["example: version bump (UserSpend)"] = timed(lambda: client.commit_spec(bumped))
        client.init_branch("wide")
        results["100 datasets: create"] = timed(
            lambda: client.commit("wide", many_datasets(100), branch="wide")
        )
        results["100 datasets: clone branch"] = timed(
            lambda: client.clone_branch("wide_clone", from_branch="wide")
        )
        for branch in client.list_branches():
            client.delete_branch(branch, even_main=True)
    with connect(settings) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")
        conn.commit()
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    runs = [run_once() for _ in range(args.repeat)]
    lines = [
        f"Commit protocol, {args.repeat} runs, local stack (Kafka KRaft 1 node, PostgreSQL 15, S3Proxy), 2 cores.",
        "",
        "| operation | median s | min s | max s |",
        "|---|---:|---:|---:|",
    ]
    for key in runs[0]:
        vals = [r[key] for r in runs]
        lines.append(
            f"| {key} | {statistics.median(vals):.3f} | {min(vals):.3f} | {max(vals):.3f} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    Path(__file__).with_name("results").mkdir(exist_ok=True)
    Path(__file__).with_name("results").joinpath("commit.md").write_text(text)


if __name__ == "__main__":
    main()
