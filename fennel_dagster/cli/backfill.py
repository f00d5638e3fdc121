"""``fennel-dagster backfill DATASET``: replay a derived dataset's offline table on Spark."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from typing import Any

from fennel_dagster.settings import get_settings


def register(sub: Any) -> None:
    p = sub.add_parser(
        "backfill",
        help="recompute a derived dataset's offline table (or a date range of it) on Spark",
    )
    p.add_argument("dataset", help="the dataset to recompute (one with a pipeline)")
    p.add_argument("--from", dest="since", type=dt.date.fromisoformat, default=None,
                   help="first event date to recompute (YYYY-MM-DD; default: the beginning)")  # fmt: skip
    p.add_argument("--to", dest="until", type=dt.date.fromisoformat, default=None,
                   help="event date to stop before (YYYY-MM-DD; default: no end)")  # fmt: skip
    p.add_argument("--branch", default="main", help="the branch whose datasets to use")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fennel_dagster.batch.replay import Progress, ReplayError, replay
    from fennel_dagster.batch.spark import spark_session
    from fennel_dagster.metadata.db import connect
    from fennel_dagster.metadata.registry import branch_jobs

    settings = get_settings()
    with connect(settings, settings.pg_schema) as conn:
        jobs = branch_jobs(conn, args.branch)
    spark = spark_session(settings, app=f"backfill {args.dataset}")
    spark.sparkContext.setLogLevel("ERROR")

    def show(p: Progress) -> None:
        print(f"\r{args.dataset} {p.bar()}", end="", file=sys.stderr, flush=True)

    try:
        report = replay(spark, settings, jobs, args.dataset, args.since, args.until, show)
    except ReplayError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        spark.stop()
    print(file=sys.stderr)
    span = f"{report.since or 'start'} .. {report.until or 'end'}"
    print(f"{report.dataset}: {report.rows} rows recomputed for {span} in {report.seconds:.1f}s "
          f"(table version {report.table_version})")  # fmt: skip
    return 0
