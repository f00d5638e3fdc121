"""Job partitions sharing a runner process (``engine.sharing``): what the engine costs on
the example repo with one setting against another, side by side in one run, alternating.

``--vary writers``: ``engine_writers_per_process`` 1 (a process per job partition) against 8
(the default). ``--vary streams``: ``engine_streams_per_process`` 1 (a process per stream
partition, as before it was a setting), None (the default: about two stream processes a
core) and ``--streams`` (slices of the stream jobs in one process).

For each run: ``examples/payments`` committed with a topic of its own (two partitions a
job), users and merchants logged, ``fennel-dagster engine`` started; once every job
partition heartbeats, transactions at a steady rate for a window. Measured: the engine's
processes, their proportional set size at the window's end (PSS: a page shared by forked
runners counts once, split among them), the engine's CPU seconds in the window, the time
from the last transaction sent to all of them in the Transaction offline table, and with
``--vary streams`` the time to UserSpend's and MerchantVolume's outputs of every one of them
(through source, joins and aggregates) and a drain: ``--burst`` transactions at once, timed
to their last aggregate output (wall, and per engine CPU-second).

    .venv/bin/python -m bench.sharing_bench --rate 200 --seconds 60 --rounds 2
    .venv/bin/python -m bench.sharing_bench --vary streams --streams 8 --rounds 2
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from confluent_kafka import Producer

from bench.batch_payments import _dataset_topic, _transactions, commit_payments
from bench.stream_bench import Engine, count_committed
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


def send_steadily(s: Settings, topic: str, rate: int, seconds: float, first: int = 0) -> int:
    """The example's transactions to ``topic`` at ``rate`` a second for ``seconds``."""
    p = Producer({"bootstrap.servers": s.kafka_servers, "linger.ms": 5})
    raws = _transactions(int(rate * seconds), first)
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


def send_burst(s: Settings, topic: str, n: int, first: int) -> None:
    p = Producer({"bootstrap.servers": s.kafka_servers, "linger.ms": 20})
    for i, raw in enumerate(_transactions(n, first)):
        p.produce(topic, raw)
        if i % 10_000 == 0:
            p.poll(0)
    p.flush(60)


def aggregates_caught_up(s: Settings, n: int) -> float:
    """Seconds until UserSpend's and MerchantVolume's topics hold ``n`` outputs each (one a
    transaction: the last stages of the example's two paths)."""
    t0 = time.monotonic()
    for entity in ("UserSpend", "MerchantVolume"):
        count_committed(s, _dataset_topic(s, entity), n, 600)
    return time.monotonic() - t0


def one_run(
    base: Settings, setting: dict[str, int | None], tag: str, rate: int, seconds: float, burst: int
) -> dict[str, float]:
    name = f"{base.namespace}{tag}"
    s = base.with_(pg_schema=name, namespace=name, state_dir=base.state_path / tag,
                   partitions=2, **setting)  # fmt: skip
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
        out = {"partitions": partitions, "processes": procs, "pss_mb": pss / 2**20,
               "cpu_per_s": cpu / (sent - t0)}  # fmt: skip
        if burst:
            aggregates_caught_up(s, n)
            out["aggregate_lag_s"] = time.monotonic() - sent
        out["offline_lag_s"] = offline_lag(table, n, sent, tag)
        if burst:
            cpu0, t0 = engine.cpu(), time.monotonic()
            send_burst(s, topic, burst, n)
            aggregates_caught_up(s, n + burst)
            wall, cpu = time.monotonic() - t0, engine.cpu() - cpu0
            out |= {"drain_per_s": burst / wall, "drain_per_cpu_s": burst / cpu}
    finally:
        engine.stop()
    return out


COLUMNS = [  # (key, header, format)
    ("partitions", "job partitions", ".0f"),
    ("processes", "engine processes", ".0f"),
    ("pss_mb", "PSS (MB)", ".0f"),
    ("cpu_per_s", "engine CPU (cores)", ".2f"),
    ("offline_lag_s", "offline table lag (s)", ".1f"),
    ("aggregate_lag_s", "aggregates lag (s)", ".1f"),
    ("drain_per_s", "drain (txn/s)", ".0f"),
    ("drain_per_cpu_s", "drain (txn per CPU-s)", ".0f"),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vary", choices=["writers", "streams"], default="writers")
    ap.add_argument("--streams", type=int, default=8, help="--vary streams: the packed setting")
    ap.add_argument("--rate", type=int, default=200, help="transactions per second")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--burst", type=int, default=20_000, help="--vary streams: the drain")
    ap.add_argument("--rounds", type=int, default=2, help="runs of each setting, alternating")
    args = ap.parse_args()
    base = get_settings()
    key = f"engine_{args.vary}_per_process"
    values: tuple[int | None, ...] = (1, 8) if args.vary == "writers" else (1, None, args.streams)
    burst = args.burst if args.vary == "streams" else 0
    rows: dict[int | None, list[dict[str, float]]] = {v: [] for v in values}
    stamp = time.strftime("%H%M%S")
    for r in range(args.rounds):
        for v in values:
            tag = f"sh{stamp}r{r}{args.vary[0]}{v or 'auto'}"
            out = one_run(base, {key: v}, tag, args.rate, args.seconds, burst)
            print(v, out, flush=True)
            rows[v].append(out)
    cols = [c for c in COLUMNS if c[0] in rows[values[0]][0]]
    drain = f"; then {burst:,} at once (the drain)" if burst else ""
    lines = [
        f"# {args.vary.capitalize()} sharing a runner process (`bench/sharing_bench.py "
        f"--vary {args.vary}`, {time.strftime('%Y-%m-%d')})",
        "",
        f"examples/payments, two partitions a job, {args.rate} transactions/s for "
        f"{args.seconds:.0f} s{drain}; {args.rounds} runs of each setting, alternating (each "
        "run's value, then the median).",
        "",
        "| `" + key + "` | " + " | ".join(h for _, h, _ in cols) + " |",
        "|---" * (len(cols) + 1) + "|",
    ]
    for v, runs in rows.items():

        def col(k: str, fmt: str, runs: list[dict[str, float]] = runs) -> str:
            vals = [r[k] for r in runs]
            each = " / ".join(format(x, fmt) for x in vals)
            return f"{each} (median {format(statistics.median(vals), fmt)})"

        lines.append(
            f"| {v or 'default (None)'} | " + " | ".join(col(k, f) for k, _, f in cols) + " |"
        )
    out_file = RESULTS if args.vary == "writers" else RESULTS.with_name("sharing_streams.md")
    out_file.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
