"""S3 sources: Spark reads new files under the prefix, the engine's source job applies the
source's rules, rows reach the dataset topic, its offline table and the lookups of a derived
aggregate; bad rows and unreadable files reach the error topic (real S3, Kafka, Spark)."""

from __future__ import annotations

import io
import json
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fennel_dagster import dataset, field, inputs, meta, pipeline, source
from fennel_dagster.aggregate import Count, Sum
from fennel_dagster.batch.s3_ingest import S3SourceError, ingest, list_files
from fennel_dagster.client import LocalClient
from fennel_dagster.engine.supervisor import Supervisor
from fennel_dagster.offline.table import OfflineTable
from fennel_dagster.s3 import s3_client
from fennel_dagster.settings import Settings
from fennel_dagster.sources import S3
from fennel_dagster.window import Continuous
from fennel_dagster.wire import plan
from tests.engine.harness import commit, read_topic, wait_for

pytestmark = pytest.mark.services
T0 = datetime(2026, 3, 1, tzinfo=UTC)


def repo(bucket: str, prefix: str, fmt: str) -> list[Any]:
    @meta(owner="lake@example.com")
    @source(S3(name="lake").bucket(bucket, prefix=prefix, format=fmt), every="1s", cdc="append")
    @dataset
    class Orders:
        uid: int
        amount: float
        ts: datetime

    @meta(owner="lake@example.com")
    @dataset(index=True)
    class Totals:
        uid: int = field(key=True)
        total: float
        n: int
        ts: datetime

        @pipeline
        @inputs(Orders)
        def agg(cls, orders):
            return orders.groupby("uid").aggregate(
                total=Sum(of="amount", window=Continuous("forever")),
                n=Count(window=Continuous("forever")),
            )

    return [Orders, Totals]


def _rows(n: int, start: int) -> list[dict[str, Any]]:
    return [
        {"uid": i % 5, "amount": float(i), "ts": (T0 + timedelta(minutes=start + i)).isoformat()}
        for i in range(n)
    ]


def _put(s: Settings, key: str, body: bytes) -> None:
    s3_client(s).put_object(Bucket=s.s3_bucket, Key=key, Body=body)


def test_s3_json_files_flow_to_the_topic_the_offline_table_and_lookups(
    engine_settings: Settings,
) -> None:
    # snapshots every second from nine runners would only compete with Spark for the disk
    s = engine_settings.with_(engine_snapshot_interval_s=3600.0, offline_flush_s=0.5)
    prefix = f"{s.namespace}/orders/"
    day1, day2 = _rows(40, 0), _rows(30, 100)
    lines = [json.dumps(r) for r in day1]
    lines += [
        '{"uid": 1, "amount": ',
        json.dumps({"uid": 2, "amount": "abc", "ts": T0.isoformat()}),
    ]
    _put(s, prefix + "2026-03-01.json", "\n".join(lines).encode())
    jobs = commit(s, repo(s.s3_bucket, prefix, "json"))
    sup = Supervisor(s, engine_id="lake")
    t = threading.Thread(target=sup.serve, daemon=True)
    t.start()
    try:
        topic = jobs["source:Orders"].spec.output_topic  # type: ignore[union-attr]
        wait_for(lambda: len(read_topic(s, topic, 4, timeout=3)) >= 40, 240, "the first file")
        _put(s, prefix + "2026-03-02.json", "\n".join(json.dumps(r) for r in day2).encode())
        wait_for(lambda: len(read_topic(s, topic, 4, timeout=3)) >= 70, 120, "the second file")
        offline = jobs["offline:Orders"].spec
        assert isinstance(offline, plan.OfflineJobSpec)
        table = OfflineTable(s, offline.table)
        wait_for(lambda: table.read(["uid"]).num_rows >= 70, 60, "the offline table")
        keys = pd.DataFrame({"uid": [0, 1, 2, 3, 4]})
        at = pd.Series([T0 + timedelta(days=1)] * 5)
        want = pd.DataFrame(day1 + day2).groupby("uid")["amount"].agg(["sum", "count"])

        def answered() -> bool:
            with LocalClient(s) as c:
                got, found = c.lookup("Totals", keys, at)
            return bool(found.all()) and got["n"].tolist() == want["count"].tolist()

        wait_for(answered, 120, "lookups of the derived aggregate")
        with LocalClient(s) as c:
            got, _ = c.lookup("Totals", keys, at)
        assert got["total"].tolist() == pytest.approx(want["sum"].tolist())
        rows = [r for _, _, r in read_topic(s, topic, 4, timeout=3)]
        assert len(rows) == 70  # each file once, though the prefix was listed many times
        assert table.read(["uid"]).num_rows == 70
        err_topic = jobs["source:Orders"].spec.error_topic  # type: ignore[union-attr]
        errors = [r for _, _, r in read_topic(s, err_topic, 1, timeout=3)]
    finally:
        sup.stop()
        t.join(120)
    reasons = sorted(e["reason"] for e in errors)
    assert len(reasons) == 2, reasons
    assert any("Orders.amount" in r for r in reasons), reasons  # "abc" is not a float
    assert any("not JSON" in r for r in reasons), reasons  # the malformed line


def test_unreadable_files_and_missing_prefixes_are_reported_and_good_files_kept(
    engine_settings: Settings, spark: Any
) -> None:
    s = engine_settings
    prefix = f"{s.namespace}/orders/"
    jobs = commit(s, repo(s.s3_bucket, prefix, "parquet"))
    ingest_job = jobs["s3_ingest:Orders"].spec
    assert isinstance(ingest_job, plan.S3IngestJobSpec)
    with pytest.raises(
        S3SourceError,
        match=rf"source s3\(lake\) of Orders: no files under s3://{s.s3_bucket}/{prefix}",
    ):
        list_files(s, ingest_job)
    buf = io.BytesIO()
    frame = pd.DataFrame(_rows(25, 0)).assign(ts=lambda d: pd.to_datetime(d["ts"], utc=True))
    # microsecond timestamps, as Spark reads them (nanosecond ones are reported unreadable)
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), buf, coerce_timestamps="us")
    _put(s, prefix + "a-good.parquet", buf.getvalue())
    _put(s, prefix + "b-broken.parquet", b"this is not parquet")
    files = list_files(s, ingest_job)
    report = ingest(spark, s, ingest_job, files)
    assert (report.files, report.rows, report.unreadable) == (1, 25, 1)
    assert ingest(spark, s, ingest_job, files).files == 0  # the ledger remembers both
    inbox = read_topic(s, ingest_job.inbox_topic, 4, timeout=3)
    assert len(inbox) == 25
    errors = [r for _, _, r in read_topic(s, ingest_job.error_topic, 1, timeout=3)]
    assert len(errors) == 1 and errors[0]["stage"] == "read"
    assert "b-broken.parquet cannot be read as parquet" in errors[0]["reason"]
    assert "source s3(lake) of Orders" in errors[0]["reason"]


def test_csv_cells_are_typed_by_the_dataset_schema_and_bad_cells_stay_visible(
    engine_settings: Settings, spark: Any
) -> None:
    s = engine_settings
    prefix = f"{s.namespace}/csv/"
    jobs = commit(s, repo(s.s3_bucket, prefix, "csv"))
    job = jobs["s3_ingest:Orders"].spec
    assert isinstance(job, plan.S3IngestJobSpec)
    body = "uid,amount,ts\n1,2.5,2026-03-01T00:00:00Z\n2,abc,2026-03-01T00:01:00Z\n"
    _put(s, prefix + "orders.csv", body.encode())
    report = ingest(spark, s, job, list_files(s, job))
    assert (report.files, report.rows) == (1, 2)
    inbox = sorted((r for _, _, r in read_topic(s, job.inbox_topic, 4, timeout=3)),
                   key=lambda r: r["uid"])  # fmt: skip
    assert inbox[0] == {"uid": 1, "amount": 2.5, "ts": "2026-03-01T00:00:00Z"}
    assert inbox[1]["amount"] == "abc"  # the source job rejects it, showing the value
