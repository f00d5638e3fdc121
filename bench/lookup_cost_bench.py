"""What one key's lookup of an aggregate dataset costs the engine, this commit against a
baseline revision, side by side in one run.

The keyless bench repo (``bench/stream_repos.py``: Count + Sum per uid over a 1 h continuous
window, served from the pipeline's state) is committed, 20,000 events over 1,000 keys are
processed, then ``LocalClient.lookup`` asks for one key at a time, keys found and keys never
seen, at now. Measured: the engine's CPU per lookup (its process tree, less its idle rate
measured just before) and the wall time per lookup as the client sees it.

    .venv/bin/python -m bench.lookup_cost_bench --baseline f3fdbe0
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
from confluent_kafka.admin import AdminClient, NewTopic

from bench.stream_bench import (
    ROOT,
    T0,
    Engine,
    baseline_checkout,
    commit_repo,
    count_committed,
    probe,
    produce_events,
)
from fennel_dagster.client import LocalClient
from fennel_dagster.settings import Settings, get_settings

RESULTS = Path(__file__).resolve().parent / "results" / "lookup_cost.md"


def measure(base: Settings, code: Path | None, tag: str, lookups: int) -> dict[str, float]:
    name = f"{base.namespace}{tag}"
    s = base.with_(pg_schema=name, namespace=name, state_dir=base.state_path / tag, partitions=1)
    src = f"{name}.events"
    admin = AdminClient({"bootstrap.servers": s.kafka_servers})
    for f in admin.create_topics([NewTopic(src, 1, 1)]).values():
        f.result(30)
    out = commit_repo(s, "keyless", src, code)
    client = LocalClient(s)
    engine = Engine(s, code)
    engine.start()
    try:
        probe(s, client, src, 30_000_000, timeout=300, at=T0 - timedelta(minutes=1))
        produce_events(s, src, 20_000, 1000)
        count_committed(s, out, 20_001, 600)
        time.sleep(3)
        cpu0, t0 = engine.cpu(), time.monotonic()
        time.sleep(5)
        idle = (engine.cpu() - cpu0) / (time.monotonic() - t0)
        now = datetime.now(UTC)
        row: dict[str, float] = {"idle_cores": idle}
        for label, first in (("found", 0), ("not found", 5_000)):
            uids = [first + i % 100 for i in range(lookups)]
            cpu0, t0 = engine.cpu(), time.monotonic()
            for u in uids:
                _, found = client.lookup("BenchAgg", pd.DataFrame({"uid": [u]}), timestamps=[now])
                assert bool(found.iloc[0]) == (label == "found"), (label, u)
            wall = time.monotonic() - t0
            cpu = engine.cpu() - cpu0 - idle * wall
            row[f"{label}: engine CPU ms"] = cpu / lookups * 1000
            row[f"{label}: wall ms"] = wall / lookups * 1000
    finally:
        engine.stop()
        client.close()
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", required=True, help="the git revision to compare with")
    ap.add_argument("--lookups", type=int, default=500, help="lookups of each kind")
    ap.add_argument("--rounds", type=int, default=2, help="runs of each side, alternating")
    args = ap.parse_args()
    base = get_settings().with_(state_dir=Path(tempfile.mkdtemp(prefix="fd-lookup-")))
    old = baseline_checkout(args.baseline)
    rows: dict[str, list[dict[str, float]]] = {"this commit": [], args.baseline: []}
    try:
        for _ in range(args.rounds):
            for side, code in (("this commit", None), (args.baseline, old)):
                tag = f"l{uuid.uuid4().hex[:6]}"
                rows[side].append(measure(base.with_(namespace="lk"), code, tag, args.lookups))
                print(side, rows[side][-1], flush=True)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, check=False)
    keys = [k for k in next(iter(rows.values()))[0] if k != "idle_cores"]
    lines = [
        f"# One key's aggregate lookup (`bench/lookup_cost_bench.py`, {time.strftime('%Y-%m-%d')})",
        "",
        f"`.venv/bin/python -m bench.lookup_cost_bench --baseline {args.baseline}`: the keyless "
        f"bench repo after 20,000 events over 1,000 keys; {args.lookups} lookups of one key "
        f"each, {args.rounds} runs of each side, alternating (each run's value). Engine CPU is "
        "its process tree's, less its idle rate measured just before.",
        "",
        "| engine | " + " | ".join(keys) + " | idle engine (cores) |",
        "|---|" + "---:|" * (len(keys) + 1),
    ]
    for side, runs in rows.items():
        cells = [" / ".join(f"{r[k]:.2f}" for r in runs) for k in [*keys, "idle_cores"]]
        lines.append(f"| {side} | " + " | ".join(cells) + " |")
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
