"""Our side of the offline point-in-time benchmark (Feast issue #3003's shape).

The same files as Feast's side (``bench.offline_data``): each ``history/fv{i}.parquet``
becomes a dataset ``Fv{i}`` (key ``user_id``, 100 float fields) whose offline table (Delta,
by event date, as the platform's offline writer lays it out) holds the file's rows; one
featureset ``Bench`` has a lookup feature per field (1,000). The timed part is what a user's
``query_offline`` runs: ``SparkOfflineQuery`` over the spine Parquet, the output written as
Parquet by Spark (named as Feast names its columns, so ``offline_feast.check_output``
checks both). Spark gets the settings Feast's side gets (``local[N]``, driver heap, shuffle
partitions) on top of the platform's own configuration.

    python -m bench.offline_ours --root DIR --spine 17000 --out result.json

The work runs in a child process, as Feast's does: peak RSS of the whole tree (Python and
the JVM), a timeout, and a crash recorded as ``{"error": ...}``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import traceback
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.offline_data import spine_path  # noqa: E402
from bench.offline_feast import (  # noqa: E402
    PeakRss,
    _end_group,
    _error_from_log,
    check_output,
    history_shape,
)


def declarations(views: int, features: int) -> tuple[list[Any], list[Any]]:
    """``Fv{i}`` datasets and the ``Bench`` featureset, declared as a user would (built in a
    loop here: 1,000 features by hand would be the same declarations, typed out)."""
    from fennel_dagster import dataset, feature, featureset, field, meta

    datasets = []
    for i in range(views):
        names = [f"fv{i}_f{j}" for j in range(features)]
        body: dict[str, Any] = {
            "__annotations__": {"user_id": int, "event_timestamp": datetime,
                                **dict.fromkeys(names, float)},
            "__module__": __name__,
            "user_id": field(key=True),
            "event_timestamp": field(timestamp=True),
        }  # fmt: skip
        datasets.append(
            meta(owner="bench@example.com")(dataset(index=True)(type(f"Fv{i}", (), body)))
        )
    feats: dict[str, Any] = {"__annotations__": {"user_id": int}, "__module__": __name__}
    for i, ds in enumerate(datasets):
        for j in range(features):
            name = f"fv{i}_f{j}"
            feats["__annotations__"][name] = float
            feats[name] = feature(getattr(ds, name))
    bench = meta(owner="bench@example.com")(featureset(type("Bench", (), feats)))
    return datasets, [bench]


def write_tables(settings: Any, root: Path, catalog: Any, views: int) -> None:
    """Each view's history as its dataset's offline table (not timed: the tables exist before
    anyone queries them, as Feast's Parquet files do)."""
    from deltalake import write_deltalake

    from fennel_dagster.offline.table import DAY, OFFSET, PARTITION, OfflineTable, arrow_schema
    from fennel_dagster.ops.index import DELETED

    for i in range(views):
        table = OfflineTable(settings, catalog.tables[f"Fv{i}"])
        if table.exists():
            continue
        hist = pq.read_table(root / "history" / f"fv{i}.parquet")
        n = hist.num_rows
        hist = hist.append_column(DAY, pc.strftime(hist["event_timestamp"], format="%Y-%m-%d"))
        hist = hist.append_column(DELETED, pa.array([False] * n))
        hist = hist.append_column(PARTITION, pa.array([0] * n, pa.int32()))
        hist = hist.append_column(OFFSET, pa.array(range(n), pa.int64()))
        write_deltalake(table.uri, hist.cast(arrow_schema(table.dataset)), partition_by=[DAY])


def worker(args: argparse.Namespace) -> dict[str, Any]:
    t0 = time.monotonic()
    import pyspark

    from fennel_dagster.batch.catalog import OfflineCatalog
    from fennel_dagster.batch.offline_query import OfflineQuery, SparkOfflineQuery
    from fennel_dagster.batch.spark import spark_conf
    from fennel_dagster.commit.compiler import compile_blueprints, jobs_of
    from fennel_dagster.commit.graph import EntityGraph
    from fennel_dagster.declare import commit_spec
    from fennel_dagster.settings import get_settings

    root: Path = args.root.resolve()
    views, features = history_shape(root)
    home = root / "ours_home"
    settings = get_settings().with_(s3_embedded=True, home_dir=home, namespace="bench")
    datasets, fsets = declarations(views, features)
    jobs = jobs_of(compile_blueprints(EntityGraph.build(commit_spec("bench", datasets, fsets)),
                                      "bench"))  # fmt: skip
    catalog = OfflineCatalog(settings, jobs)
    write_tables(settings, root, catalog, views)
    setup = time.monotonic() - t0

    conf = spark_conf(settings, app="offline-bench")
    conf |= {"spark.master": f"local[{args.cores}]", "spark.driver.memory": args.driver_memory,
             "spark.sql.shuffle.partitions": str(args.shuffle_partitions),
             "spark.local.dir": str(home / "spark-local"),
             "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS"}  # fmt: skip
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers: this interpreter
    builder = SparkSession.builder
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    (bench,) = [fs.spec() for fs in fsets]
    oq = SparkOfflineQuery(spark, catalog, [bench])
    out = root / f"out_ours_{args.spine}.parquet"
    shutil.rmtree(out, ignore_errors=True)
    startup = time.monotonic() - t0

    t1 = time.monotonic()
    spine = spark.read.parquet(str(spine_path(root, args.spine)))
    q = OfflineQuery(("Bench.user_id",), ("Bench",), "event_timestamp",
                     {"Bench.user_id": "user_id"})  # fmt: skip
    result = oq.run(q, spine)
    names = {c: c.split(".", 1)[1] for c in result.columns if c.startswith("Bench.")}
    result.withColumnsRenamed(names).write.mode("overwrite").parquet(str(out))
    wall = time.monotonic() - t1
    floor = floor_of(spark, catalog, views, spine_path(root, args.spine), features, root)
    spark.stop()
    shutil.rmtree(home / "spark-local", ignore_errors=True)
    files = sorted(out.glob("*.parquet"))
    rows = sum(pq.read_metadata(f).num_rows for f in files)
    null_f0 = sum(pq.read_table(f, columns=["fv0_f0"]).column(0).null_count for f in files)
    return {
        "pyspark_version": pyspark.__version__,
        "wall_s": round(wall, 3),
        **floor,
        "startup_s": round(startup, 3),
        "setup_s": round(setup, 3),
        "rows_out": rows,
        "columns_out": len(pq.read_schema(files[0]).names) if files else 0,
        "rows_fv0_f0_null": null_f0,
        "features": views * features,
        "views": views,
        "output": str(out),
        "check": check_output(root, out),
        "spark_conf": {
            k: conf[k]
            for k in ("spark.master", "spark.driver.memory", "spark.sql.shuffle.partitions")
        },  # fmt: skip
    }


def floor_of(
    spark: Any, catalog: Any, views: int, spine: Path, features: int, root: Path
) -> dict[str, float]:
    """The least any Spark plan of this query does, timed in the same (now warm) session:
    read every view's offline table whole (a no-op sink), and write a spine-sized Parquet of
    as many feature columns (computed from the spine: no join). ``query_offline`` cannot take
    less wall time than their sum; nor can any other Spark plan that reads these tables."""
    from pyspark.sql import functions as F  # noqa: N812 - the PySpark convention

    t0 = time.monotonic()
    for i in range(views):
        path = catalog.table(f"Fv{i}", "the floor").spark_path
        spark.read.format("delta").load(path).write.format("noop").mode("overwrite").save()
    read = time.monotonic() - t0
    t1 = time.monotonic()
    cols = [(F.col("user_id") * 1.0 + j).alias(f"fv{i}_f{j}")
            for i in range(views) for j in range(features)]  # fmt: skip
    out = root / "floor_out.parquet"
    spark.read.parquet(str(spine)).select("user_id", "event_timestamp", *cols).write.mode(
        "overwrite"
    ).parquet(str(out))
    write = time.monotonic() - t1
    shutil.rmtree(out, ignore_errors=True)
    return {"floor_read_s": round(read, 3), "floor_write_s": round(write, 3),
            "floor_s": round(read + write, 3)}  # fmt: skip


def supervise(args: argparse.Namespace) -> dict[str, Any]:
    root: Path = args.root.resolve()
    result: dict[str, Any] = {"contender": "ours", "spine_rows": args.spine}
    res_file = root / f"ours_{args.spine}.worker.json"
    log = root / f"ours_{args.spine}.log"
    res_file.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "bench.offline_ours", "--worker", "--root", str(root),
           "--spine", str(args.spine), "--out", str(res_file), "--cores", str(args.cores),
           "--driver-memory", args.driver_memory,
           "--shuffle-partitions", str(args.shuffle_partitions)]  # fmt: skip
    env = {**os.environ, "TZ": "UTC", "PYTHONUNBUFFERED": "1"}
    with log.open("w") as log_f:
        proc = subprocess.Popen(cmd, stdout=log_f, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True, cwd=Path(__file__).resolve().parents[1])  # fmt: skip
        sampler = PeakRss(proc.pid)
        sampler.start()
        rc: int | None = None
        try:
            rc = proc.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            _end_group(proc.pid, signal.SIGTERM)
        finally:
            _end_group(proc.pid, signal.SIGKILL)
            proc.wait()
        peak = sampler.stop()
    result["peak_rss_mb"] = round(peak / 2**20, 1)
    if rc is None:
        result["error"] = f"timeout after {args.timeout} s"
    elif rc != 0 or not res_file.exists():
        result["error"] = _error_from_log(log, rc)
    else:
        result.update(json.loads(res_file.read_text()))
        res_file.unlink()
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, required=True, help="where bench.offline_data wrote")
    ap.add_argument("--spine", type=int, default=17_000)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--timeout", type=float, default=1800.0)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--driver-memory", default="8g")
    ap.add_argument("--shuffle-partitions", type=int, default=16)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        try:
            row = worker(args)
        except Exception as e:  # noqa: BLE001 - the parent records it as the run's error
            traceback.print_exc()
            row = {"error": f"{type(e).__name__}: {str(e).strip().splitlines()[0][:500]}"}
        args.out.write_text(json.dumps(row))
        return
    row = supervise(args)
    print(json.dumps(row, indent=2))
    if args.out:
        args.out.write_text(json.dumps(row, indent=2))


if __name__ == "__main__":
    main()
