"""Offline tables: a dataset's topic lands in its Delta table exactly once, even when the
writer is SIGKILLed during its commits; Spark reads the same table (real Kafka, S3, Spark)."""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from typing import Any

import pandas as pd
import pytest

from fennel_dagster.engine.error_records import decode_error
from fennel_dagster.engine.offline_writer import OfflineWriter
from fennel_dagster.offline.table import OfflineTable
from fennel_dagster.ops.rows import to_records
from fennel_dagster.settings import Settings
from fennel_dagster.wire import plan
from tests.engine import repo
from tests.engine.harness import (
    commit,
    create_topic,
    offline_writer,
    produce_raw,
    produce_rows,
    raw_records,
    read_topic,
    table_rows,
    wait_for,
)

pytestmark = pytest.mark.services


def test_sigkill_the_offline_writer_during_commits_and_the_table_equals_the_topic(
    engine_settings: Settings,
) -> None:
    s = engine_settings.with_(offline_flush_s=0.3)
    create_topic(s, f"{s.namespace}.raw")
    jobs = commit(s, repo.graph(f"{s.namespace}.raw"))
    job = jobs["offline:Txn"]
    assert isinstance(job.spec, plan.OfflineJobSpec)
    topic = job.spec.input_topic
    table = OfflineTable(s, job.spec.table)
    ev = repo.events(20000, keys=20, seed=3)
    sent: list[pd.DataFrame] = []
    stop = threading.Event()

    def trickle() -> None:  # rows keep arriving, so the writer is always about to commit
        for i in range(0, len(ev), 40):
            produce_rows(s, topic, to_records(ev.iloc[i : i + 40]))
            sent.append(ev.iloc[i : i + 40])
            if stop.wait(0.25):
                return

    producer = threading.Thread(target=trickle, daemon=True)
    producer.start()
    kills = 0
    proc = None
    try:
        while kills < 12:
            proc = offline_writer(s, job)
            before = table.version()
            # kill once the writer is committing: after a commit of its own, at a random moment
            wait_for(lambda b=before: table.version() != b, 60, "a commit")  # type: ignore[misc]
            time.sleep(random.uniform(0.0, 0.5))
            os.kill(proc.pid, signal.SIGKILL)  # type: ignore[arg-type]
            proc.join(10)
            kills += 1
        stop.set()
        producer.join(60)
        proc = offline_writer(s, job)  # the last run finishes the topic
        produced = pd.concat(sent, ignore_index=True)
        want = sorted((p, o) for p, o, _ in read_topic(s, topic, 4, expect=len(produced)))
        wait_for(lambda: len(table_rows(table)) >= len(want), 120, "the whole topic")
        time.sleep(1.0)
    finally:
        stop.set()
        if proc is not None and proc.is_alive():
            proc.terminate()
            proc.join(30)
    assert kills >= 12
    assert len(want) == len(produced)
    assert table_rows(table) == want  # every offset once: nothing lost, nothing twice
    got = table.read().to_pandas().sort_values(["uid", "ts", "amount"]).reset_index(drop=True)
    exp = produced.sort_values(["uid", "ts", "amount"]).reset_index(drop=True)
    assert got["uid"].tolist() == exp["uid"].tolist()
    assert got["amount"].tolist() == pytest.approx(exp["amount"].tolist())
    assert (pd.to_datetime(got["ts"], utc=True) == pd.to_datetime(exp["ts"], utc=True)).all()
    days = set(got["__day"])
    assert days == {t.date().isoformat() for t in pd.to_datetime(exp["ts"], utc=True)}


def test_a_row_the_table_cannot_hold_goes_to_the_error_topic_and_the_writer_goes_on(
    engine_settings: Settings,
) -> None:
    s = engine_settings.with_(offline_flush_s=0.3)
    create_topic(s, f"{s.namespace}.raw")
    jobs = commit(s, repo.graph(f"{s.namespace}.raw"))
    job = jobs["offline:Txn"]
    assert isinstance(job.spec, plan.OfflineJobSpec) and job.spec.error_topic
    topic = job.spec.input_topic
    ev = repo.events(60, keys=5, seed=4)
    produce_rows(s, topic, to_records(ev.iloc[:30]))
    # hand-made messages on the dataset's topic: not JSON, and a uid beyond int64
    huge = {"uid": 2**70, "amount": 1.0, "ts": repo.T0.isoformat()}
    produce_raw(s, topic, [b"not json", json.dumps(huge).encode()], partitions=1)
    produce_rows(s, topic, to_records(ev.iloc[30:]))
    writer = OfflineWriter(s, job, "test")
    stop = threading.Event()
    failed: list[BaseException] = []

    def run() -> None:
        try:
            writer.run(stop, lambda: None)
        except BaseException as e:  # noqa: BLE001
            failed.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    table = OfflineTable(s, job.spec.table)
    try:
        wait_for(lambda: table.version() is not None and len(table_rows(table)) >= 60, 60,
                 "the good rows")  # fmt: skip
        time.sleep(1)
    finally:
        stop.set()
        t.join(30)
    assert not failed, failed
    assert len(table_rows(table)) == 60 and writer.bad_rows == 2
    errors = [decode_error(v) for v in raw_records(s, job.spec.error_topic)]
    assert sorted(e["stage"] for e in errors) == ["decode", "offline"]
    offline = next(e for e in errors if e["stage"] == "offline")
    assert "does not fit its fields" in offline["reason"]
    assert offline["payload"] == json.dumps(huge).encode()
    assert offline["where"] == "offline table"


def test_spark_reads_the_offline_table_the_engine_wrote(
    engine_settings: Settings, spark: Any
) -> None:
    s = engine_settings.with_(offline_flush_s=0.2)
    create_topic(s, f"{s.namespace}.raw")
    jobs = commit(s, repo.graph(f"{s.namespace}.raw"))
    job = jobs["offline:Txn"]
    assert isinstance(job.spec, plan.OfflineJobSpec)
    ev = repo.events(300, keys=5, seed=5)
    produce_rows(s, job.spec.input_topic, to_records(ev))
    table = OfflineTable(s, job.spec.table)
    proc = offline_writer(s, job)
    try:
        wait_for(lambda: len(table_rows(table)) >= len(ev), 90, "the rows")
    finally:
        proc.terminate()
        proc.join(30)
    df = spark.read.format("delta").load(table.spark_path)
    assert df.count() == len(ev)
    totals = {r["uid"]: r["s"] for r in df.groupBy("uid").agg({"amount": "sum"})
              .withColumnRenamed("sum(amount)", "s").collect()}  # fmt: skip
    want = ev.groupby("uid")["amount"].sum().to_dict()
    assert totals == pytest.approx(want)
