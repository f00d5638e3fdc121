"""How long the broker holds a runner's empty fetch (``engine_fetch_wait_ms``): what the
engine costs idle and at a live rate, and how fresh it stays, side by side in one run.

Every runner's consumer long-polls the broker. A fetch that finds nothing new waits on the
broker up to ``fetch.wait.max.ms`` (data arriving answers it at once), then the consumer asks
again, so a short wait means many empty round trips for every idle input of every runner.
For each setting, alternating, in rounds:

- **the example repo** (``examples/payments``, two partitions a job, 22 job partitions):
  the engine's CPU over 10 s idle, then over a window of transactions at a steady rate, and
  the time from the last one sent to all of them in the Transaction offline table;
- **the keyless bench repo** (``bench/stream_repos.py``, one partition): event -> lookup
  freshness idle, and under a live load of events stamped now (as ``stream_bench``).

    .venv/bin/python -m bench.fetch_bench --waits 10 500 --rounds 2
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from bench.sharing_bench import committed_example, engine_up, offline_lag, send_steadily
from bench.stream_bench import T0, Engine, commit_repo, pct, probe, under_load
from fennel_dagster.client import LocalClient
from fennel_dagster.settings import Settings, get_settings

RESULTS = Path(__file__).resolve().parent / "results" / "fetch.md"


def example_repo(s: Settings, tag: str, rate: int, seconds: float) -> dict[str, float]:
    topic, partitions, table = committed_example(s)
    engine = Engine(s)
    engine.start()
    try:
        engine_up(s, partitions, tag)
        cpu0, t0 = engine.cpu(), time.monotonic()
        time.sleep(10)
        idle = (engine.cpu() - cpu0) / (time.monotonic() - t0)
        cpu0, t0 = engine.cpu(), time.monotonic()
        n = send_steadily(s, topic, rate, seconds)
        sent = time.monotonic()
        busy = (engine.cpu() - cpu0) / (sent - t0)
        lag = offline_lag(table, n, sent, tag)
    finally:
        engine.stop()
    return {"partitions": partitions, "idle_cores": idle, "busy_cores": busy, "lag_s": lag}


def keyless_repo(s: Settings, probes: int, rate: float, load_s: float) -> dict[str, float]:
    s = s.with_(partitions=1)
    src = f"{s.namespace}.events"
    admin = AdminClient({"bootstrap.servers": s.kafka_servers})
    for f in admin.create_topics([NewTopic(src, 1, 1)]).values():
        f.result(30)
    commit_repo(s, "keyless", src, None)
    client = LocalClient(s)
    engine = Engine(s)
    engine.start()
    try:
        probe(s, client, src, 30_000_000, timeout=300, at=T0 - timedelta(minutes=1))
        fresh = [probe(s, client, src, 10_000_000 + i) for i in range(probes)]
        load = under_load(s, client, src, rate, load_s, 1000, 50_000_000)
    finally:
        engine.stop()
        client.close()
    return {"idle_p50": statistics.median(fresh), "idle_p99": pct(fresh, 0.99),
            "load_p50": load["p50"], "load_p99": load["p99"], "load_probes": load["probes"]}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--waits", type=int, nargs="+", default=[10, 500], help="fetch waits, ms")
    ap.add_argument("--rounds", type=int, default=2, help="runs of each setting, alternating")
    ap.add_argument("--rate", type=int, default=200, help="example repo: transactions/s")
    ap.add_argument("--seconds", type=float, default=40.0, help="example repo: load window")
    ap.add_argument("--probes", type=int, default=30, help="keyless repo: idle probes")
    ap.add_argument("--events", type=float, default=5000.0, help="keyless repo: live events/s")
    ap.add_argument("--load-s", type=float, default=20.0, help="keyless repo: probing window")
    args = ap.parse_args()
    base = get_settings()
    state = Path(tempfile.mkdtemp(prefix="fd-fetch-"))
    runs: dict[int, list[dict[str, float]]] = {w: [] for w in args.waits}
    for _ in range(args.rounds):
        for wait in args.waits:
            tag = f"f{uuid.uuid4().hex[:6]}w{wait}"
            s = base.with_(pg_schema=tag, namespace=tag, state_dir=state / tag,
                           engine_fetch_wait_ms=wait)  # fmt: skip
            out = example_repo(s.with_(partitions=2), tag, args.rate, args.seconds)
            k = f"{tag}k"
            out |= keyless_repo(s.with_(pg_schema=k, namespace=k, state_dir=state / k),
                                args.probes, args.events, args.load_s)  # fmt: skip
            print(wait, out, flush=True)
            runs[wait].append(out)
    text = report(args, runs)
    RESULTS.write_text(text)
    print(text)


def report(args: argparse.Namespace, runs: dict[int, list[dict[str, float]]]) -> str:
    def col(rows: list[dict[str, float]], k: str, fmt: str, scale: float = 1.0) -> str:
        vals = [r[k] * scale for r in rows]
        each = " / ".join(format(v, fmt) for v in vals)
        return f"{each} (median {format(statistics.median(vals), fmt)})"

    first = next(iter(runs.values()))[0]
    lines = [
        f"# Fetch wait (`bench/fetch_bench.py`, {time.strftime('%Y-%m-%d')})",
        "",
        f"`.venv/bin/python -m bench.fetch_bench --waits {' '.join(map(str, args.waits))} "
        f"--rounds {args.rounds}`: {args.rounds} runs of each setting, alternating (each run's "
        "value, then the median). Example repo: examples/payments, two partitions a job "
        f"({first['partitions']:.0f} job partitions), {args.rate} transactions/s for "
        f"{args.seconds:.0f} s. Keyless repo: one partition, {args.probes} idle probes, then "
        f"{args.events:,.0f} events/s stamped now over 1,000 keys with probes for "
        f"{args.load_s:.0f} s.",
        "",
        "| engine_fetch_wait_ms | example: idle CPU (cores) | example: CPU at the rate (cores) | example: offline table lag (s) | keyless: idle freshness p50 / p99 (ms) | keyless: under load p50 / p99 (ms) |",
        "|---|---|---|---|---|---|",
    ]  # fmt: skip
    for wait, rows in runs.items():
        lines.append(
            f"| {wait} | {col(rows, 'idle_cores', '.2f')} | {col(rows, 'busy_cores', '.2f')} | "
            f"{col(rows, 'lag_s', '.1f')} | {col(rows, 'idle_p50', '.0f', 1000)} / "
            f"{col(rows, 'idle_p99', '.0f', 1000)} | {col(rows, 'load_p50', '.0f', 1000)} / "
            f"{col(rows, 'load_p99', '.0f', 1000)} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
