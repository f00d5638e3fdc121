"""In-process throughput of ``aggregate.run_continuous``: tiled (now) vs per-event scans (before).

    .venv/bin/python -m bench.ops_bench [--events 200000] [--old-events 20000] [--batch 5000]

A keyed Count + Sum over ``Continuous("1h")``, 1000 keys, events about in time order (2 hours
of event time, up to a minute of disorder), batches of ``--batch`` rows (the engine's default
transaction size), state in ``MemoryState`` (each batch's ``WriteBatch`` applied before the
next). The old implementation is the module as of commit ``OLD`` (before tiles), loaded from
git; it scans every event of the window per event, so it runs on the first ``--old-events``
events only. Also a 7-day window and a ``forever`` window with the new one, and the cost of
lookups. Prints a Markdown table (also written to bench/results/ops.md).
"""

from __future__ import annotations

import argparse
import subprocess
import time
import types
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fennel_dagster.ops import aggregate
from fennel_dagster.ops.state import MemoryState
from fennel_dagster.wire import spec

OLD = "104b377"  # the last commit with per-event window scans
T0 = pd.Timestamp("2026-01-01", tz="UTC")


def old_module() -> Any:
    src = subprocess.run(
        ["git", "show", f"{OLD}:fennel_dagster/ops/aggregate.py"],
        check=True, capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent,
    ).stdout  # fmt: skip
    mod = types.ModuleType("aggregate_before_tiles")
    exec(compile(src, "aggregate_before_tiles", "exec"), mod.__dict__)  # noqa: S102
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


def throughput(mod: Any, nd: spec.AggregateNode, df: pd.DataFrame, batch: int) -> tuple[float, Any]:
    state = MemoryState()
    start = time.perf_counter()
    for i in range(0, len(df), batch):
        from fennel_dagster.ops.state import WriteBatch

        wb = WriteBatch()
        mod.run_continuous(nd, "bench", df.iloc[i : i + batch], "ts", state, wb)
        state.apply(wb)
    return len(df) / (time.perf_counter() - start), state


def lookups_per_s(mod: Any, nd: spec.AggregateNode, state: MemoryState, keys: int) -> float:
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
    old = old_module()
    hour = spec.WindowSpec("continuous", duration=3600)
    rows: list[tuple[str, str, int, float, float]] = []

    def measure(label: str, impl: str, mod: Any, window: spec.WindowSpec, n: int) -> None:
        nd = node(window)
        rate, state = throughput(mod, nd, df.iloc[:n], args.batch)
        rows.append((label, impl, n, rate, lookups_per_s(mod, nd, state, args.keys)))
        print(rows[-1], flush=True)

    measure("Count+Sum, Continuous(1h)", f"before tiles ({OLD})", old, hour, args.old_events)
    measure("Count+Sum, Continuous(1h)", "tiles", aggregate, hour, args.old_events)
    measure("Count+Sum, Continuous(1h)", "tiles", aggregate, hour, args.events)
    week = spec.WindowSpec("continuous", duration=7 * 86400)
    measure("Count+Sum, Continuous(7d)", "tiles", aggregate, week, args.events)
    measure("Count+Sum, forever", "tiles", aggregate, spec.WindowSpec("forever"), args.events)

    cmd = "`.venv/bin/python -m bench.ops_bench" + (
        "" if (args.events, args.old_events, args.batch) == (200_000, 20_000, 5000)
        else f" --events {args.events} --old-events {args.old_events} --batch {args.batch}"
    ) + "`"  # fmt: skip
    lines = [
        f"`run_continuous` in process, MemoryState, {args.keys} keys, batches of {args.batch} "
        "events, 2 h of event time; one core. Made by " + cmd + ".",
        "",
        "| aggregation | implementation | events | events/s | lookups/s (1000 keys) |",
        "|---|---|---:|---:|---:|",
        *(f"| {a} | {b} | {n:,} | {r:,.0f} | {q:,.0f} |" for a, b, n, r, q in rows),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    out = Path(__file__).resolve().parent / "results" / "ops.md"
    out.write_text("# Operators\n\n" + text)


if __name__ == "__main__":
    main()
