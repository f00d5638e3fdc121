"""What a lookup endpoint's follower pays to catch up with its primary after each batch.

A lookup reads a read-only follower (RocksDB's secondary instance) of the runner's hangar,
and catches it up first whenever the primary wrote since (``Hangar.catch_up``). This writes
batches of entries to a primary, as a runner does, and after each one catches a follower up,
as the next lookup would; it counts the CPU of each catch-up (every thread of the process:
RocksDB's own included) and its wall time. Side by side, rounds taking turns, in one run:

- ``rocksdb default``: the follower opens table files with RocksDB's 16 threads;
- ``tuned``: with ``RocksTuning().follower_opening_threads`` (this commit's default).

    .venv/bin/python -m bench.follower_bench
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from fennel_dagster.engine.hangar import Hangar
from fennel_dagster.engine.rocks_tuning import RocksTuning
from fennel_dagster.ops.state import WriteBatch

RESULTS = Path(__file__).resolve().parent / "results" / "follower.md"
SIDES = {"rocksdb default": 16, "tuned": RocksTuning().follower_opening_threads}


def catch_ups(threads: int, families: int, entries: int, batches: int) -> tuple[float, float]:
    """Median CPU and wall milliseconds of a follower's catch-up after a batch of ``entries``
    written to one of ``families`` column families (keys 24 bytes, values 40, random)."""
    tuning = RocksTuning(follower_opening_threads=threads)
    with tempfile.TemporaryDirectory(prefix="fd-follower-") as tmp:
        root = Path(tmp)
        primary = Hangar(root / "primary", tuning=tuning)
        first = WriteBatch()
        for i in range(families):
            first.put(f"ns{i}", b"k", b"v")
        primary.apply(first, offsets={("topic", 0): 0})
        follower = Hangar.open_secondary(root / "primary", root / "follower", tuning)
        cpu, wall = [], []
        try:
            for b in range(batches):
                batch = WriteBatch()
                space = batch.space(f"ns{b % families}")
                for _ in range(entries):
                    space[os.urandom(24)] = os.urandom(40)
                primary.apply(batch, offsets={("topic", 0): b + 1})
                c0, t0 = time.process_time(), time.perf_counter()
                follower.catch_up()
                cpu.append(time.process_time() - c0)
                wall.append(time.perf_counter() - t0)
        finally:
            follower.close()
            primary.close()
    return statistics.median(cpu) * 1e3, statistics.median(wall) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", type=int, nargs="+", default=[3, 12])
    ap.add_argument("--entries", type=int, nargs="+", default=[10, 1000, 5000])
    ap.add_argument("--batches", type=int, default=40, help="catch-ups per round")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    rows = []
    for families in a.families:
        for entries in a.entries:
            got: dict[str, list[tuple[float, float]]] = {side: [] for side in SIDES}
            for _ in range(a.rounds):
                for side, threads in SIDES.items():
                    got[side].append(catch_ups(threads, families, entries, a.batches))
            cells = []
            for side in SIDES:
                cpu = statistics.median(c for c, _ in got[side])
                wall = statistics.median(w for _, w in got[side])
                cells.append(f"{cpu:.2f} / {wall:.2f}")
            base = statistics.median(c for c, _ in got["rocksdb default"])
            tuned = statistics.median(c for c, _ in got["tuned"])
            rows.append(f"| {families} | {entries:,} | {' | '.join(cells)} | "
                        f"{base / tuned:.1f}x |")  # fmt: skip
            print(rows[-1], flush=True)
    day = datetime.now(UTC).date().isoformat()
    RESULTS.write_text(
        f"# A follower's catch-up after each batch (`bench/follower_bench.py`, {day})\n\n"
        f"`.venv/bin/python -m bench.follower_bench`; {os.cpu_count()} cores. Per catch-up, "
        f"the median of {a.batches} catch-ups per round, then of {a.rounds} rounds (the two "
        "sides taking turns): the process's CPU ms (RocksDB's threads included) / wall ms.\n\n"
        "| column families | entries a batch | RocksDB's default (16 table-opening threads) "
        f"| tuned ({SIDES['tuned']} thread) | CPU: default / tuned |\n"
        "|---:|---:|---:|---:|---:|\n" + "\n".join(rows) + "\n"
    )
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
