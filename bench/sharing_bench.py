"""Writers sharing a runner process (``engine.sharing``): what the engine costs on the
example repo with ``engine_writers_per_process`` 1 (a process per job partition, as before)
and 8 (the default), side by side in one run, alternating.

For each run: ``examples/payments`` committed with a topic of its own (two partitions a
job), users and merchants logged, ``fennel-dagster engine`` started; once every job
partition heartbeats, transactions at a steady rate for a window. Measured: the engine's
processes, their proportional set size at the window's end (PSS: a page shared by forked
runners counts once, split among them), the engine's CPU seconds in the window, and the time
from the last transaction sent to all of them in the Transaction offline table.

    .venv/bin/python -m bench.sharing_bench --rate 200 --seconds 60 --rounds 2
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from confluent_kafka import Producer

from bench.batch_payments import _transactions, commit_payments
from bench.stream_bench import Engine
from fennel_dagster.metadata import registry
from fennel_dagster.metadata.db import connect
from fennel_dagster.offline.table import OfflineTable
from fennel_dagster.settings import Settings, get_settings
from fennel_dagster.stack import proctree
from fennel_dagster.wire import plan

RESULTS = Path(__file__).resolve().parent / "results" / "sharing.md"


def tree_pss(pid: int) -> tuple[int, int]:
    """(processes, PSS bytes) of ``pid`` and every process under it."""
    pids = [pid, *proctree.descendants(pid)]
    total = 0
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) * 1024
                    break
        except OSError:
            continue
    return len(pids), total


def committed_example(s: Settings) -> tuple[str, int, OfflineTable]:
    """examples/payments committed, two partitions a job: its topic, its job partitions and
    the Transaction offline table."""
    topic = commit_payments(s, partitions=2)
    with connect(s, s.pg_schema, autocommit=True) as conn:
        jobs = registry.list_jobs(conn)
    txn = next(j for j in jobs if j.kind == "offline" and j.spec.dataset.name == "Transaction")
    assert isinstance(txn.spec, plan.OfflineJobSpec)
    return topic, sum(j.partitions for j in jobs), OfflineTable(s, txn.spec.table)


def engine_up(s: Settings, partitions: int, tag: str) -> None:
    """Returns once every job partition heartbeats and start-up is spent."""
    deadline = time.monotonic() + 300
    while True:
        with connect(s, s.pg_schema, autocommit=True) as conn:
            if len(registry.runner_owners(conn)) >= partitions:
                break
        if time.monotonic() > deadline:
            raise RuntimeError(f"{tag}: not every job partition started in 300 s")
        time.sleep(1)
    time.sleep(5)


def send_steadily(s: Settings, topic: str, rate: int, seconds: float) -> int:
    """The example's transactions to ``topic`` at ``rate`` a second for ``seconds``."""
    p = Producer({"bootstrap.servers": s.kafka_servers, "linger.ms": 5})
    raws = _transactions(int(rate * seconds))
    t0 = time.monotonic()
    for i, raw in enumerate(raws):
        p.produce(topic, raw)
        p.poll(0)
        time.sleep(max(0.0, t0 + (i + 1) / rate - time.monotonic()))
    p.flush(30)
    return len(raws)


def offline_lag(table: OfflineTable, n: int, sent: float, tag: str) -> float:
    """Seconds from ``sent`` until the Transaction offline table holds ``n`` rows."""
    while table.read(["txn_id"]).num_rows < n:
        if time.monotonic() - sent > 300:
            raise RuntimeError(f"{tag}: the Transaction table did not catch up in 300 s")
        time.sleep(0.2)
    return time.monotonic() - sent


def one_run(
    base: Settings, per_process: int, tag: str, rate: int, seconds: float
) -> dict[str, float]:
    name = f"{base.namespace}{tag}"
    s = base.with_(pg_schema=name, namespace=name, state_dir=base.state_path / tag,
                   partitions=2, engine_writers_per_process=per_process)  # fmt: skip
    topic, partitions, table = committed_example(s)
    engine = Engine(s)
    engine.start()
    assert engine.proc is not None
    try:
        engine_up(s, partitions, tag)
        cpu0, t0 = engine.cpu(), time.monotonic()
        n = send_steadily(s, topic, rate, seconds)
        sent = time.monotonic()
        cpu = engine.cpu() - cpu0
        procs, pss = tree_pss(engine.proc.pid)
        caught = offline_lag(table, n, sent, tag)
    finally:
        engine.stop()
    return {"partitions": partitions, "processes": procs, "pss_mb": pss / 2**20,
            "cpu_per_s": cpu / (sent - t0), "offline_lag_s": caught}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=int, default=200, help="transactions per second")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--rounds", type=int, default=2, help="runs of each setting, alternating")
    args = ap.parse_args()
    base = get_settings()
    rows: dict[int, list[dict[str, float]]] = {1: [], 8: []}
    stamp = time.strftime("%H%M%S")
    for r in range(args.rounds):
        for per in (1, 8):
            out = one_run(base, per, f"sh{stamp}r{r}w{per}", args.rate, args.seconds)
            print(per, out, flush=True)
            rows[per].append(out)
    lines = [
        f"# Writers sharing a runner process (`bench/sharing_bench.py`, {time.strftime('%Y-%m-%d')})",
        "",
        f"examples/payments, two partitions a job, {args.rate} transactions/s for "
        f"{args.seconds:.0f} s; {args.rounds} runs of each setting, alternating (each run's "
        "value, then the median).",
        "",
        "| writers per process | job partitions | engine processes | PSS (MB) | engine CPU (cores) | offline table lag (s) |",
        "|---|---|---|---|---|---|",
    ]  # fmt: skip
    for per, runs in rows.items():

        def col(k: str, fmt: str, runs: list[dict[str, float]] = runs) -> str:
            vals = [r[k] for r in runs]
            each = " / ".join(format(v, fmt) for v in vals)
            return f"{each} (median {format(statistics.median(vals), fmt)})"

        lines.append(f"| {per} | {runs[0]['partitions']:.0f} | {col('processes', '.0f')} | "
                     f"{col('pss_mb', '.0f')} | {col('cpu_per_s', '.2f')} | "
                     f"{col('offline_lag_s', '.1f')} |")  # fmt: skip
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
