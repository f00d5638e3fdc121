"""Batch benchmark: the streaming benchmark's Count + Sum continuous aggregation computed by
Spark (the backfill path) vs by the stream engine, on the same events, in one run.

``python -m bench.batch_bench --sizes 100000,1000000 --engine-events 100000`` against the
local stack. Spark (its session warmed up by a small run first) reads the events from a Delta table on S3 (the shape of an offline
table), runs the pipeline with ``batch.pipeline.SparkPipeline`` and writes the output Delta
table to S3, as a backfill does; its CPU is the whole process tree (driver, JVM, Python
workers). The engine runs ``fennel-dagster engine`` on the same events pre-produced to Kafka
(``bench.stream_bench.engine_throughput``). Events per CPU-second = events/s per core.
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

from bench import batch_payments
from bench.stream_bench import engine_throughput, produce_events, tree_cpu
from bench.stream_repos import keyless
from fennel_dagster.batch.pipeline import SparkPipeline
from fennel_dagster.batch.spark import spark_session
from fennel_dagster.declare import commit_spec
from fennel_dagster.settings import Settings, get_settings

ROOT = Path(__file__).resolve().parents[1]
T0_US = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp() * 1_000_000)


def make_events(spark: object, s: Settings, n: int, keys: int, path: str) -> None:
    """n events {uid, amount, ts} (100 ms apart, +-2 s jitter) as a Delta table, by Spark."""
    from pyspark.sql import functions as F  # noqa: N812

    df = spark.range(n).select(  # type: ignore[attr-defined]
        (F.hash("id", F.lit(1)) % keys).cast("long").alias("uid_raw"),
        ((F.abs(F.hash("id", F.lit(2))) % 100) + 1).cast("double").alias("amount"),
        F.timestamp_micros(
            F.lit(T0_US) + F.col("id") * 100_000 + (F.hash("id", F.lit(3)) % 2_000_000)
        ).alias("ts"),
    )
    df = df.select(F.abs("uid_raw").alias("uid"), "amount", "ts")
    df.write.format("delta").mode("overwrite").save(path)


def spark_backfill(spark: object, src: str, out: str) -> dict[str, float]:
    commit = commit_spec("bench", keyless("unused"), [])
    by_name = {d.name: d for d in commit.datasets}
    agg = by_name["BenchAgg"]
    cpu0, t0 = tree_cpu(os.getpid()), time.monotonic()
    events = spark.read.format("delta").load(src)  # type: ignore[attr-defined]
    n = events.count()
    rows = SparkPipeline(agg.pipelines[0], by_name).run({"BenchTxn": events})
    rows.write.format("delta").mode("overwrite").save(out)
    wall, cpu = time.monotonic() - t0, tree_cpu(os.getpid()) - cpu0
    return {"events": n, "events/s": n / wall, "events/cpu-s": n / cpu, "wall": wall, "cpu": cpu}


def spark_floor(spark: object, src: str, out: str, shuffle: bool) -> dict[str, float]:
    """What any Spark backfill of this pipeline does at least, with no operator at all: read
    the events' Delta table and write the output's (``shuffle``: also regroup by uid and sort
    each uid's events by time, as a keyed windowed aggregate must). No backfill on Spark can
    beat these rates, so they bound the Spark / engine ratio any implementation reaches."""
    from pyspark.sql import functions as F  # noqa: N812

    cpu0, t0 = tree_cpu(os.getpid()), time.monotonic()
    events = spark.read.format("delta").load(src)  # type: ignore[attr-defined]
    n = events.count()
    if shuffle:
        events = events.repartition("uid").sortWithinPartitions("uid", "ts")
    rows = events.select("uid", F.col("amount").alias("total"), F.lit(1).alias("n"), "ts")
    rows.write.format("delta").mode("overwrite").save(out)
    wall, cpu = time.monotonic() - t0, tree_cpu(os.getpid()) - cpu0
    return {"events": n, "events/s": n / wall, "events/cpu-s": n / cpu, "wall": wall, "cpu": cpu}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000000,10000000", help="Spark input sizes (events)")
    ap.add_argument("--engine-events", type=int, default=100_000)
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--partitions", type=int, default=8, help="spark.sql.shuffle.partitions")
    ap.add_argument(
        "--payments-sizes",
        default="100000,1000000",
        help="Spark input sizes (transactions) of the example repo end to end",
    )
    ap.add_argument("--payments-engine-events", type=int, default=10_000)
    args = ap.parse_args()
    base = get_settings()
    tag = f"bb{uuid.uuid4().hex[:6]}"
    s = base.with_(pg_schema=tag, namespace=tag, state_dir=base.state_path / tag)

    spark = spark_session(s, app="batch-bench")
    spark.sparkContext.setLogLevel("ERROR")
    spark.conf.set("spark.sql.shuffle.partitions", str(args.partitions))
    root = f"s3a://{s.s3_bucket}/{tag}"
    # warm-up (JIT, Python workers, S3A connections), not measured: a backfill service
    # keeps its session, as the engine keeps its runners
    make_events(spark, s, 10_000, args.keys, f"{root}/warm")
    spark_backfill(spark, f"{root}/warm", f"{root}/warm-out")
    spark_floor(spark, f"{root}/warm", f"{root}/warm-floor", shuffle=True)
    spark_rows = {}
    floors: dict[str, dict[str, float]] = {}
    for n in [int(x) for x in args.sizes.split(",")]:
        make_events(spark, s, n, args.keys, f"{root}/events-{n}")
        spark_rows[n] = spark_backfill(spark, f"{root}/events-{n}", f"{root}/out-{n}")
        print(f"spark {n:,}: {spark_rows[n]}", flush=True)
    biggest = f"{root}/events-{max(spark_rows)}"
    for label, shuffle in FLOORS.items():
        floors[label] = spark_floor(spark, biggest, f"{root}/floor-{shuffle}", shuffle)
        print(f"{label}: {floors[label]}", flush=True)
    pay_rows = {}
    batch_payments.make_tables(spark, 10_000, f"{root}/pay-warm")  # warm-up, not measured
    batch_payments.spark_backfill(spark, f"{root}/pay-warm", 10_000)
    for n in [int(x) for x in args.payments_sizes.split(",")]:
        batch_payments.make_tables(spark, n, f"{root}/pay-{n}")
        pay_rows[n] = batch_payments.spark_backfill(spark, f"{root}/pay-{n}", n)
        print(f"spark payments {n:,}: {pay_rows[n]}", flush=True)
    spark.stop()

    from confluent_kafka.admin import AdminClient, NewTopic

    src = f"{tag}.src"
    admin = AdminClient({"bootstrap.servers": s.kafka_servers})
    for f in admin.create_topics([NewTopic(src, 1, 1)]).values():
        f.result(30)
    produce_events(s, src, args.engine_events, args.keys)
    eng = engine_throughput(s, src, args.engine_events, args.keys, "keyless", None, "e")
    print(f"engine {args.engine_events:,}: {eng}", flush=True)
    pay_eng = batch_payments.engine_backfill(s, args.payments_engine_events)
    print(f"engine payments {args.payments_engine_events:,}: {pay_eng}", flush=True)

    lines = [
        "# Batch benchmark: Spark backfill vs the stream engine",
        "",
        f"`python -m bench.batch_bench --sizes {args.sizes} --engine-events {args.engine_events}"
        f" --keys {args.keys} --partitions {args.partitions} --payments-sizes "
        f"{args.payments_sizes} --payments-engine-events {args.payments_engine_events}` on "
        f"{datetime.now(UTC):%Y-%m-%d}; 2 cores, 24 GiB, Spark local[*], one Kafka broker. "
        'First the streaming benchmark\'s pipeline (Count + Sum per uid over Continuous("1h"), '
        "1000 keys).",
        *_table("Spark backfill (Delta on S3 -> Delta on S3)", spark_rows, args.engine_events, eng),
        *_floor_table(floors, eng),
        "",
        *NATIVE_NOTES,
        "",
        "## The example repo end to end (examples/payments)",
        "",
        "Transactions -> EnrichedTransaction (a Python assign, two as-of joins) -> UserSpend "
        "(filter, assign, 1-hour/7-day/forever Count/Sum/Avg/Max/LastK/Distinct in one sorted "
        "pass per key) and MerchantVolume (a 1-day count, the same road); "
        f"{batch_payments.USERS} users, {batch_payments.MERCHANTS} merchants. Events are "
        "transactions.",
        *_table(
            "Spark backfill (3 Delta tables in, 3 out)",
            pay_rows,
            args.payments_engine_events,
            pay_eng,
        ),  # fmt: skip
        "",
        *PAYMENTS_NOTES,
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    out = ROOT / "bench" / "results" / "batch.md"
    out.write_text(text)


def _table(
    label: str, spark_rows: dict[int, dict[str, float]], engine_events: int, eng: dict[str, float]
) -> list[str]:
    """One shape's rows (Spark at each size, the engine), per-core ratio and growth."""
    sizes = sorted(spark_rows)
    lines = [
        "",
        "| contender | events | events/s (wall) | events per CPU-second | wall s | CPU s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for n in sizes:
        r = spark_rows[n]
        lines.append(f"| {label} | {n:,} | {r['events/s']:,.0f} "
                     f"| {r['events/cpu-s']:,.0f} | {r['wall']:.1f} | {r['cpu']:.1f} |")  # fmt: skip
    lines.append(f"| stream engine (Kafka -> Kafka, exactly once) | {engine_events:,} "
                 f"| {eng['events/s']:,.0f} | {eng['events/cpu-s']:,.0f} | {eng['wall']:.1f} "
                 f"| {eng['cpu']:.1f} |")  # fmt: skip
    big = spark_rows[sizes[-1]]
    lines += [
        "",
        "| ratio | value | target |",
        "|---|---:|---:|",
        f"| Spark / engine, per core (largest size) | {big['events/cpu-s'] / eng['events/cpu-s']:.1f} | >= 50 |",
    ]
    if len(sizes) > 1:
        small = spark_rows[sizes[0]]
        growth = (big["wall"] / small["wall"]) / (sizes[-1] / sizes[0])
        lines.append(f"| wall time growth / event growth ({sizes[0]:,} -> {sizes[-1]:,}) "
                     f"| {growth:.2f} | <= 1.0 (linear) |")  # fmt: skip
    return lines


FLOORS = {
    "Spark floor: Delta read + Delta write, no operator": False,
    "Spark floor: Delta read + shuffle by uid + sort by time + Delta write, no operator": True,
}


def _floor_table(floors: dict[str, dict[str, float]], eng: dict[str, float]) -> list[str]:
    """The floors at the largest size, and the Spark / engine ratio each would give."""
    lines = [
        "",
        "| floor (largest size; no backfill on Spark does less) | events | events per "
        "CPU-second | CPU s | ratio to the engine it bounds |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, r in floors.items():
        lines.append(f"| {label} | {r['events']:,} | {r['events/cpu-s']:,.0f} | {r['cpu']:.1f} "
                     f"| {r['events/cpu-s'] / eng['events/cpu-s']:.1f} |")  # fmt: skip
    return lines


NATIVE_NOTES = [
    "Notes. This pipeline takes Spark's native road (continuous count/sum as window functions,",
    "`batch/native.py`). The time is mostly fixed cost at 1M (Delta log, job scheduling), hence",
    "the sub-linear growth. The engine's side of the ratio moves between runs (4,929 events per",
    "CPU-second on 2026-11-23, 8,326 and 8,873 in two runs on 2026-11-24, same command): compare",
    "within one run. The floors run no operator at all on the same 10M events in the same",
    "session: a keyed window needs each key's events together and in time order, and the",
    "offline tables are laid out by event date, so the second floor (a shuffle and a sort",
    "between the read and the write) is the least any Spark backfill of it does. Its rate over",
    "the engine's bounds the Spark / engine ratio any implementation on Spark can reach here.",
]
PAYMENTS_NOTES = [
    "Notes. Both joins' right sides (1,000 users, 200 merchants) are small: validity intervals",
    "in a broadcast join, no shuffle of the transactions (`batch/asof.py`; a large right side",
    "takes one sort-merge pass); the assign's user code runs on pandas with the other columns",
    "passed through as Arrow. Both aggregates take the sorted-run",
    "road (`ops/aggregate/sorted_runs.py` in `mapInArrow`): per key, windows move forward over",
    "time-sorted history with running exact totals, monotonic queues and value counts, O(1)",
    "per event (before, at 2026-11-23: the engine's operator code, whose per-event cost grows",
    "with the window's contents — 445 events per CPU-second at 1M, 4.5x super-linear — and",
    "Spark's sliding frames, which recompute per row). What is left: Python per event in the",
    "sorted pass (~10 us for UserSpend's eight aggregations), the assign's pandas round trip,",
    "the aggregates' shuffles and the Delta writes; the stream engine's own rate on this repo",
    "is the other half of the ratio (issue 15).",
]


if __name__ == "__main__":
    main()
