"""Feast's side of the offline point-in-time benchmark (Feast issue #3003's shape).

Run with the Feast venv that ``bench/feast_env.sh`` makes, on data that
``bench.offline_data`` wrote::

    bench/.work/feast-venv/bin/python bench/offline_feast.py --root DIR --spine 17000 \
        --out result.json
    bench/.work/feast-venv/bin/python bench/offline_feast.py --root DIR --check --spine 17000

A benchmark run builds a throwaway Feast repo under DIR (Spark offline store on
``local[N]``, file registry, one ``user`` entity, one FeatureView per ``history/fv{i}``
file over a ``SparkSource``), then times ``get_historical_features(...).to_spark_df()``
written to ``DIR/out_feast_{spine}.parquet``: Spark writes the result, so nothing is
collected to the driver, as a training-set export would run. The spine goes in as a Spark
DataFrame over its Parquet file (Feast's Spark store takes a SQL string, pandas or a Spark
DataFrame; pandas would be converted through the driver, which a large spine should avoid).

The work runs in a child process (this script with ``--worker``) so that a JVM that runs
out of memory, or a run past ``--timeout``, becomes ``{"error": ...}`` in the result rather
than a crash, and so that the peak RSS is that of the whole tree doing the work (Python and
the Spark JVM), sampled from /proc every 0.2 s by this parent.

``--check`` answers two questions against pandas' ``merge_asof`` instead of timing:
whether Feast takes a history row whose timestamp equals the spine row's (``<=`` or ``<``)
and whether it drops rows older than the view's ttl, on five crafted spine rows; and, when
``out_feast_{spine}.parquet`` exists, whether two of its feature columns agree with
``merge_asof`` on every row.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.offline_data import END, feature_refs, spine_path  # noqa: E402

BENCH_TTL = timedelta(days=60)  # longer than the 30-day window: ttl never drops a row
CHECK_TTL = timedelta(days=1)  # shorter than many gaps between a user's events


def spark_conf(repo: Path, cores: int, driver_memory: str, shuffle_partitions: int) -> dict:
    """Spark settings of the offline store: Feast's documented example, sized for this box.

    Feast's Spark store docs set the UI and event log off, the session time zone to UTC,
    quoted-regex column names and Arrow. The Hive catalog of that example is left out
    (Feast only registers temporary views; Hive would leave a Derby metastore behind). The
    rest is standard Spark tuning for a small local machine: few shuffle partitions (the
    default 200 is for clusters; adaptive execution still coalesces), a driver heap large
    enough for local mode, where the driver is the only executor, and scratch space kept
    inside the throwaway repo.
    """
    return {
        "spark.master": f"local[{cores}]",
        "spark.driver.memory": driver_memory,
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.eventLog.enabled": "false",
        "spark.sql.parser.quotedRegexColumnNames": "true",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.fallback.enabled": "true",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # The output's timestamps as the input's (timestamp[us, UTC]), not Spark's legacy INT96.
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        "spark.local.dir": str(repo / "spark-local"),
        "spark.sql.warehouse.dir": str(repo / "spark-warehouse"),
        "spark.driver.extraJavaOptions": "-Duser.timezone=UTC",
    }


def history_shape(root: Path) -> tuple[int, int]:
    """(views, features per view) of the generated history, read from its Parquet footers."""
    views = 0
    while (root / "history" / f"fv{views}.parquet").exists():
        views += 1
    if views == 0:
        raise SystemExit(f"no history under {root}: run `python -m bench.offline_data` first")
    first = pq.read_schema(root / "history" / "fv0.parquet")
    return views, len(first.names) - 2


def make_store(
    repo: Path, root: Path, views: int, features: int, ttl: timedelta, conf: dict
) -> Any:
    """A fresh Feast repo at ``repo`` with the views applied; returns its FeatureStore."""
    import yaml
    from feast import Entity, FeatureStore, FeatureView, Field, ValueType
    from feast.infra.offline_stores.contrib.spark_offline_store.spark_source import (
        SparkSource,
    )
    from feast.types import Float64, Int64

    shutil.rmtree(repo, ignore_errors=True)
    (repo / "data").mkdir(parents=True)
    config = {
        "project": "bench_offline",
        "provider": "local",
        "registry": "data/registry.db",  # local file registry; apply is not timed
        "online_store": {"type": "sqlite", "path": "data/online.db"},  # unused: online=False
        "offline_store": {"type": "spark", "spark_conf": conf},
        "entity_key_serialization_version": 3,
    }
    (repo / "feature_store.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    user = Entity(name="user", join_keys=["user_id"], value_type=ValueType.INT64)
    fvs = [
        FeatureView(
            name=f"fv{i}",
            entities=[user],
            ttl=ttl,
            schema=[Field(name="user_id", dtype=Int64)]
            + [Field(name=f"fv{i}_f{j}", dtype=Float64) for j in range(features)],
            source=SparkSource(
                name=f"fv{i}_history",
                path=str((root / "history" / f"fv{i}.parquet").resolve()),
                file_format="parquet",
                timestamp_field="event_timestamp",
            ),
            online=False,
        )
        for i in range(views)
    ]
    store = FeatureStore(repo_path=str(repo))
    store.apply([user, *fvs])
    return store


def start_spark(store: Any) -> Any:
    """The Spark session Feast itself would start from feature_store.yaml (started here so
    that JVM start-up counts as startup, not query time)."""
    from feast.infra.offline_stores.contrib.spark_offline_store.spark import (
        get_spark_session_or_start_new_with_repoconfig,
    )

    spark = get_spark_session_or_start_new_with_repoconfig(store.config.offline_store)
    spark.sparkContext.setLogLevel("WARN")
    return spark


def parquet_rows(path: Path) -> int:
    """Rows of a Parquet file or of a Spark output directory, from footers only."""
    files = sorted(path.glob("*.parquet")) if path.is_dir() else [path]
    return sum(pq.read_metadata(f).num_rows for f in files)


def worker(args: argparse.Namespace) -> dict[str, Any]:
    """The timed run, in the child process: Feast setup, then query + write."""
    t0 = time.monotonic()
    import feast
    import pyspark

    root: Path = args.root.resolve()
    views, features = history_shape(root)
    spine = spine_path(root, args.spine)
    if not spine.exists():
        raise SystemExit(f"{spine} is missing: run `python -m bench.offline_data` first")
    repo = root / f"feast_repo_{args.spine}"  # one per spine: runs may overlap
    conf = spark_conf(repo, args.cores, args.driver_memory, args.shuffle_partitions)
    store = make_store(repo, root, views, features, BENCH_TTL, conf)
    spark = start_spark(store)
    entity_df = spark.read.parquet(str(spine))
    refs = feature_refs(views, features)
    out = root / f"out_feast_{args.spine}.parquet"
    shutil.rmtree(out, ignore_errors=True)
    startup = time.monotonic() - t0

    t1 = time.monotonic()
    job = store.get_historical_features(entity_df=entity_df, features=refs)
    result = job.to_spark_df()  # runs Feast's CREATE VIEW statements: planning, no rows yet
    planned = time.monotonic() - t1
    result.write.mode("overwrite").parquet(str(out))
    wall = time.monotonic() - t1

    spark.stop()
    shutil.rmtree(repo / "spark-local", ignore_errors=True)
    files = sorted(out.glob("*.parquet"))
    null_f0 = sum(pq.read_table(f, columns=["fv0_f0"]).column(0).null_count for f in files)
    return {
        "feast_version": feast.__version__,
        "pyspark_version": pyspark.__version__,
        "wall_s": round(wall, 3),
        "startup_s": round(startup, 3),
        "plan_s": round(planned, 3),  # the part of wall_s before Spark reads any row
        "rows_out": parquet_rows(out),
        "columns_out": len(pq.read_schema(files[0]).names) if files else 0,
        "rows_fv0_f0_null": null_f0,
        "features": len(refs),
        "views": views,
        "output": str(out),
        "spark_conf": {k: v for k, v in conf.items() if not k.endswith(".dir")},
    }


def tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and all its descendants, from /proc. (``stack.proctree``
    has the same; this script runs in Feast's venv, where ``fennel_dagster`` cannot load.)"""
    kids: dict[int, list[int]] = {}
    for st in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(st.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(st.parent.name))
    page = os.sysconf("SC_PAGE_SIZE")
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            total += int(Path(f"/proc/{p}/statm").read_text().split()[1]) * page
        except (OSError, IndexError, ValueError):
            pass
        todo += kids.get(p, [])
    return total


class PeakRss(threading.Thread):
    """Samples the RSS of a process tree every ``every`` seconds; keeps the largest sum."""

    def __init__(self, pid: int, every: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.pid, self.every, self.peak = pid, every, 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.peak = max(self.peak, tree_rss(self.pid))
            self._stop_event.wait(self.every)

    def stop(self) -> int:
        self._stop_event.set()
        self.join()
        return self.peak


def _error_from_log(log: Path, rc: int) -> str:
    """A one-line cause for a failed worker: an OOM when the log shows one, else its tail."""
    text = log.read_text(errors="replace") if log.exists() else ""
    if "OutOfMemoryError" in text:
        return f"out of memory (java.lang.OutOfMemoryError; exit {rc}); see {log}"
    if rc < 0:
        return f"killed by signal {-rc} (the kernel's OOM killer?); see {log}"
    tail = [ln for ln in text.strip().splitlines() if ln.strip()][-3:]
    return f"worker exited {rc}: {' | '.join(tail)[-500:]}"


def _end_group(pgid: int, sig: signal.Signals) -> None:
    """Signal the worker's process group (it and its Spark JVM), if any is left."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _terminated(signum: int, _frame: object) -> None:
    """SIGTERM as an exception, so that supervise's cleanup runs."""
    raise SystemExit(128 + signum)


def supervise(args: argparse.Namespace) -> dict[str, Any]:
    """Run the worker with a timeout and a peak-RSS sampler; always return a result row."""
    root: Path = args.root.resolve()
    result: dict[str, Any] = {"contender": "feast", "spine_rows": args.spine}
    res_file = root / f"feast_{args.spine}.worker.json"
    log = root / f"feast_{args.spine}.log"
    res_file.unlink(missing_ok=True)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--root", str(root)]
    cmd += ["--spine", str(args.spine), "--out", str(res_file), "--cores", str(args.cores)]
    cmd += ["--driver-memory", args.driver_memory]
    cmd += ["--shuffle-partitions", str(args.shuffle_partitions)]
    env = {**os.environ, "TZ": "UTC", "PYTHONUNBUFFERED": "1"}
    with log.open("w") as log_f:
        # Its own session: on timeout the whole group (Python and the JVM) is ended by pgid.
        proc = subprocess.Popen(
            cmd, stdout=log_f, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        sampler = PeakRss(proc.pid)
        sampler.start()
        rc: int | None = None
        try:
            rc = proc.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            _end_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
        finally:
            # Also when this parent is interrupted: leave no worker or JVM running.
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


def _utc_ns(ts: Any) -> Any:
    """A timestamp column as datetime64[ns, UTC]; naive ones (Spark's INT96) are UTC."""
    ts = ts.dt.tz_localize("UTC") if ts.dt.tz is None else ts.dt.tz_convert("UTC")
    return ts.astype("datetime64[ns, UTC]")


def _asof(spine: Any, history: Any, column: str, exact: bool, ttl: timedelta | None) -> Any:
    """pandas' backward as-of join: the reference answer, under one equal-timestamp rule."""
    import pandas as pd

    left = spine.assign(event_timestamp=_utc_ns(spine.event_timestamp))
    right = history[["user_id", "event_timestamp", column]].assign(
        event_timestamp=_utc_ns(history.event_timestamp)
    )
    return pd.merge_asof(
        left.sort_values("event_timestamp"),
        right.sort_values("event_timestamp"),
        on="event_timestamp",
        by="user_id",
        direction="backward",
        allow_exact_matches=exact,
        tolerance=pd.Timedelta(ttl) if ttl else None,
    )


def _same(a: Any, b: Any) -> bool:
    """Equal float columns, nulls equal to nulls."""
    import numpy as np

    return bool(np.allclose(a.to_numpy(float), b.to_numpy(float), equal_nan=True, rtol=0))


def _crafted_spine(history: Any, ttl: timedelta) -> Any:
    """Five spine rows that separate the rules: an equal timestamp, one µs before it, before
    a user's first event, past ttl after an event (the next is later still), and the end."""
    import pandas as pd

    h = history.sort_values(["user_id", "event_timestamp"]).reset_index(drop=True)
    one_us = pd.Timedelta(microseconds=1)
    users = sorted(h.user_id.unique())
    first = h[h.user_id == users[0]]
    mid = first.iloc[len(first) // 2]
    second = h[h.user_id == users[1]].iloc[0]
    gap = h.groupby("user_id").event_timestamp.diff().shift(-1)
    wide = h[(gap > pd.Timedelta(ttl) + pd.Timedelta(hours=2)) & (h.user_id > users[1])].iloc[0]
    rows = [
        (mid.user_id, mid.event_timestamp),  # equal timestamp: <= takes this row, < not
        (mid.user_id, mid.event_timestamp - one_us),
        (second.user_id, second.event_timestamp - pd.Timedelta(hours=1)),  # no history yet
        (wide.user_id, wide.event_timestamp + pd.Timedelta(ttl) + pd.Timedelta(hours=1)),
        (users[2], pd.Timestamp(END) - pd.Timedelta(minutes=1)),
    ]
    spine = pd.DataFrame(rows, columns=["user_id", "event_timestamp"])
    spine["user_id"] = spine.user_id.astype("int64")
    spine["event_timestamp"] = pd.to_datetime(spine.event_timestamp, utc=True)
    return spine


def check(args: argparse.Namespace) -> dict[str, Any]:
    """Feast's answers vs merge_asof: five crafted rows (ttl 1 day), then the full output."""

    os.environ["TZ"] = "UTC"
    time.tzset()
    root: Path = args.root.resolve()
    history = pq.read_table(
        root / "history" / "fv0.parquet", columns=["user_id", "event_timestamp", "fv0_f0"]
    ).to_pandas()
    repo = root / "feast_check_repo"
    store = make_store(repo, root, 1, 1, CHECK_TTL, spark_conf(repo, args.cores, "2g", 4))
    spark = start_spark(store)
    spine = _crafted_spine(history, CHECK_TTL)
    got = store.get_historical_features(entity_df=spine.copy(), features=["fv0:fv0_f0"]).to_df()
    spark.stop()
    shutil.rmtree(repo, ignore_errors=True)
    got["event_timestamp"] = _utc_ns(got.event_timestamp)
    keys = ["user_id", "event_timestamp"]
    table = spine.assign(event_timestamp=_utc_ns(spine.event_timestamp))
    table = table.sort_values("event_timestamp")[keys]
    variants = {
        "<= with ttl": (True, CHECK_TTL),
        "< with ttl": (False, CHECK_TTL),
        "<= without ttl": (True, None),
        "< without ttl": (False, None),
    }
    for name, (exact, ttl) in variants.items():
        ref = _asof(spine, history, "fv0_f0", exact, ttl)
        table = table.merge(ref.rename(columns={"fv0_f0": name}), on=keys)
    table = table.merge(got.rename(columns={"fv0_f0": "feast"}), on=keys, how="left")
    matches = [n for n in variants if _same(table["feast"], table[n])]
    report: dict[str, Any] = {
        "check": "feast vs merge_asof on 5 crafted spine rows, feature fv0:fv0_f0, ttl 1 day",
        "rows_feast": len(got),
        "matching_rules": matches,
        "equal_timestamp": "inclusive (<=)" if "<= with ttl" in matches else "see table",
        "ttl_respected": bool({"<= with ttl", "< with ttl"} & set(matches)),
        "table": json.loads(table.astype({"event_timestamp": str}).to_json(orient="records")),
    }
    out = root / f"out_feast_{args.spine}.parquet"
    if out.exists():
        report["full_output"] = check_output(root, out)
    return report


def check_output(root: Path, out: Path) -> dict[str, Any]:
    """Two feature columns of a benchmark output (first and last view) vs merge_asof."""
    views, features = history_shape(root)
    result: dict[str, Any] = {"output": str(out)}
    for view, feat in ((0, 0), (views - 1, features - 1)):
        col = f"fv{view}_f{feat}"
        got = pq.read_table(out, columns=["user_id", "event_timestamp", col]).to_pandas()
        hist = pq.read_table(
            root / "history" / f"fv{view}.parquet", columns=["user_id", "event_timestamp", col]
        ).to_pandas()
        ref = _asof(got[["user_id", "event_timestamp"]], hist, col, True, BENCH_TTL)
        got["event_timestamp"] = _utc_ns(got.event_timestamp)
        both = got.merge(ref, on=["user_id", "event_timestamp"], suffixes=("", "_ref"))
        result[col] = {
            "rows": len(got),
            "nulls": int(got[col].isna().sum()),
            "equal_to_merge_asof": _same(both[col], both[f"{col}_ref"]) and len(both) == len(got),
        }
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, required=True, help="where bench.offline_data wrote")
    ap.add_argument("--spine", type=int, default=17_000, help="spine rows (spine_{N}.parquet)")
    ap.add_argument("--out", type=Path, help="result JSON (default: print only)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds for the whole run")
    ap.add_argument("--cores", type=int, default=2, help="Spark local[N]")
    ap.add_argument("--driver-memory", default="8g", help="Spark driver heap (local mode)")
    ap.add_argument("--shuffle-partitions", type=int, default=16)
    ap.add_argument("--check", action="store_true", help="correctness vs merge_asof instead")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.worker:
        try:
            row = worker(args)
        except Exception as e:  # the parent records it as the run's error
            traceback.print_exc()
            row = {"error": f"{type(e).__name__}: {str(e).strip().splitlines()[0][:500]}"}
        args.out.write_text(json.dumps(row))
        return
    signal.signal(signal.SIGTERM, _terminated)
    result = check(args) if args.check else supervise(args)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
