"""In-process throughput of ``aggregate.run_continuous``: now vs JSON tiles vs per-event scans.

    .venv/bin/python -m bench.ops_bench [--events 200000] [--old-events 20000] [--batch 5000]

A keyed Count + Sum over ``Continuous("1h")``, 1000 keys, events about in time order (2 hours
of event time, up to a minute of disorder), batches of ``--batch`` rows (the engine's default
transaction size), state in ``MemoryState`` (each batch's ``WriteBatch`` applied before the
next), and in a RocksDB ``Hangar`` (the engine's store: each batch's ``WriteBatch`` applied
after the batch). Earlier implementations are loaded from git: ``JSON_TILES`` (tiles with
JSON values, per-key scans), run on the same events, and ``OLD`` (before tiles), which scans
every event of the window per event, so it runs on the first ``--old-events`` events only.
Also a 7-day window and a ``forever`` window, and the cost of lookups. Prints a Markdown
table (also written to bench/results/ops.md).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fennel_dagster.engine.hangar import Hangar
from fennel_dagster.ops import aggregate
from fennel_dagster.ops.state import MemoryState, WriteBatch
from fennel_dagster.wire import spec

OLD = "104b377"  # the last commit with per-event window scans
JSON_TILES = "8c540e2"  # the last commit with JSON tiles read per key
T0 = pd.Timestamp("2026-01-01", tz="UTC")


def old_module(commit: str = OLD) -> Any:
    src = subprocess.run(
        ["git", "show", f"{commit}:fennel_dagster/ops/aggregate.py"],
        check=True, capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent,
    ).stdout  # fmt: skip
    mod = types.ModuleType(f"aggregate_{commit}")
    sys.modules[mod.__name__] = mod  # dataclasses look their module up
    exec(compile(src, f"aggregate_{commit}", "exec"), mod.__dict__)  # noqa: S102
    return mod


def node(window: spec.WindowSpec) -> spec.AggregateNode:
    return spec.AggregateNode(
        "n1", "n0", ("uid",),
        (spec.AggSpec("count", "n", window), spec.AggSpec("sum", "s", window, of="amount")),
    )  # fmt: skip


def events(n: int, keys: int, seed: int = 7) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    span_us = 2 * 3600 * 1_000_000
    t = np.sort(rng.integers(0, span_us, n)) + rng.integers(0, 60_000_000, n)
    return pd.DataFrame(
        {"uid": pd.array(rng.integers(0, keys, n), dtype="Int64"),
         "amount": np.round(rng.uniform(0, 500, n), 2),
         "ts": T0 + pd.to_timedelta(t, unit="us")}
    )  # fmt: skip


def throughput(
    mod: Any, nd: spec.AggregateNode, df: pd.DataFrame, batch: int, state: Any
) -> tuple[float, Any]:
    start = time.perf_counter()
    for i in range(0, len(df), batch):
        wb = WriteBatch()
        mod.run_continuous(nd, "bench", df.iloc[i : i + batch], "ts", state, wb)
        state.apply(wb)
    return len(df) / (time.perf_counter() - start), state


def lookups_per_s(mod: Any, nd: spec.AggregateNode, state: Any, keys: int) -> float:
    q = pd.DataFrame({"uid": pd.array(np.arange(keys) % keys, dtype="Int64")})
    ts = pd.Series([T0 + pd.Timedelta(hours=2)] * len(q))
    start = time.perf_counter()
    mod.lookup_aggregate(state, "bench", nd, q, ts)
    return len(q) / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--old-events", type=int, default=20_000)
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=5000)
    args = ap.parse_args()
    df = events(args.events, args.keys)
    old, json_tiles = old_module(OLD), old_module(JSON_TILES)
    hour = spec.WindowSpec("continuous", duration=3600)
    rows: list[tuple[str, str, str, int, float, float]] = []
    scratch = Path(tempfile.mkdtemp(prefix="ops_bench_"))

    def measure(
        label: str, impl: str, mod: Any, window: spec.WindowSpec, n: int, store: str
    ) -> None:
        nd = node(window)
        path = scratch / f"h{len(rows)}"
        state = MemoryState() if store == "MemoryState" else Hangar(path)
        try:
            rate, state = throughput(mod, nd, df.iloc[:n], args.batch, state)
            rows.append((label, impl, store, n, rate, lookups_per_s(mod, nd, state, args.keys)))
        finally:
            if isinstance(state, Hangar):
                state.close()
                shutil.rmtree(path, ignore_errors=True)
        print(rows[-1], flush=True)

    try:
        label = "Count+Sum, Continuous(1h)"
        if args.old_events:
            before = f"before tiles ({OLD})"
            measure(label, before, old, hour, args.old_events, "MemoryState")
            measure(label, "now", aggregate, hour, args.old_events, "MemoryState")
        for store in ("MemoryState", "Hangar"):
            measure(label, f"JSON tiles ({JSON_TILES})", json_tiles, hour, args.events, store)
            measure(label, "now", aggregate, hour, args.events, store)
        week = spec.WindowSpec("continuous", duration=7 * 86400)
        forever = spec.WindowSpec("forever")
        for store in ("MemoryState", "Hangar"):
            measure("Count+Sum, Continuous(7d)", "now", aggregate, week, args.events, store)
            measure("Count+Sum, forever", "now", aggregate, forever, args.events, store)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    cmd = "`.venv/bin/python -m bench.ops_bench" + (
        "" if (args.events, args.old_events, args.batch) == (200_000, 20_000, 5000)
        else f" --events {args.events} --old-events {args.old_events} --batch {args.batch}"
    ) + "`"  # fmt: skip
    lines = [
        f"`run_continuous` in process, {args.keys} keys, batches of {args.batch} events, 2 h of "
        "event time, state in MemoryState or a RocksDB Hangar (each batch's WriteBatch applied "
        "after it); one core. Made by " + cmd + ".",
        "",
        "| aggregation | implementation | state | events | events/s | lookups/s (1000 keys) |",
        "|---|---|---|---:|---:|---:|",
        *(f"| {a} | {b} | {st} | {n:,} | {r:,.0f} | {q:,.0f} |" for a, b, st, n, r, q in rows),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    out = Path(__file__).resolve().parent / "results" / "ops.md"
    out.write_text("# Operators\n\n" + text)


if __name__ == "__main__":
    main()
