"""S3 sinks: a dataset's rows in a Delta table at the sink's bucket and prefix, exactly once.

``@sink(S3(...).bucket(b, prefix=p, format="delta"), how="incremental")`` compiles to an
``S3SinkJobSpec`` that the offline writer runs like an offline table, in the sink's bucket of
the platform's object store. The unit tests check the compiler and the commit rules; the
services tests commit through the real client, log rows to a webhook, run the source job and
the writer (its own process, through ``run_forever``) over real Kafka and S3, and read the
Delta table back with delta-rs: every logged row once, across a restart of the writer.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pandas as pd
import pytest
from deltalake import DeltaTable

from fennel_dagster import dataset, meta, source
from fennel_dagster.client import LocalClient
from fennel_dagster.commit.compiler import compile_blueprints, jobs_of
from fennel_dagster.commit.environment import select_env
from fennel_dagster.commit.errors import CommitRejected
from fennel_dagster.commit.executable import PLATFORM_RULES
from fennel_dagster.commit.graph import EntityGraph
from fennel_dagster.commit.validate import validate
from fennel_dagster.declare import commit_spec
from fennel_dagster.engine.offline_writer import MissingSinkBucket, OfflineWriter
from fennel_dagster.engine.runner import run_forever
from fennel_dagster.metadata.registry import of_spec
from fennel_dagster.mock import MockClient
from fennel_dagster.offline.table import OFFSET, PARTITION, storage_options
from fennel_dagster.s3 import s3_client
from fennel_dagster.settings import Settings, get_settings
from fennel_dagster.sources import S3, Kafka, Snowflake, Webhook, sink
from fennel_dagster.wire import plan
from fennel_dagster.wire.codec import to_jsonable
from tests.engine.harness import Fleet, commit, offline_writer, read_topic, wait_for

T0 = datetime(2026, 1, 1, tzinfo=UTC)
OWNER = "lake@example.com"


def lake(bucket: str, prefix: str = "lake/txn/", env: list[str] | None = None,
         **extra: Any) -> Any:  # fmt: skip
    """A keyless dataset fed by a webhook, sinking its rows to ``s3://bucket/prefix``."""

    @meta(owner=OWNER)
    @sink(S3(name="lake").bucket(bucket, prefix=prefix, format="delta"), how="incremental",
          env=env, **extra)  # fmt: skip
    @source(Webhook(name="wh").endpoint("txn"), disorder="14d", cdc="append")
    @dataset
    class Txn:
        uid: int
        amount: float
        ts: datetime

    return Txn


def sink_jobs(datasets: list[Any], env: str | None = None) -> list[plan.S3SinkJobSpec]:
    c = commit_spec("s3sinks", datasets, env=env)
    bs = compile_blueprints(EntityGraph.build(select_env(c) if env else c))
    return [j for j in jobs_of(bs) if isinstance(j, plan.S3SinkJobSpec)]


def refusals(datasets: list[Any]) -> list[tuple[str, str, str]]:
    errors = validate(commit_spec("r", datasets), None, PLATFORM_RULES)
    return [(e.entity, e.where, e.message) for e in errors]


# --------------------------------------------------------------------------- unit


def test_the_compiler_emits_one_writer_job_for_the_sinks_table() -> None:
    bs = compile_blueprints(EntityGraph.build(commit_spec("s", [lake("b", "p")])))
    [job] = [j for j in jobs_of(bs) if isinstance(j, plan.S3SinkJobSpec)]
    topic = next(b.name for b in bs.of_kind("topic") if b.spec_dict()["role"] == "dataset")
    assert (job.input_topic, job.partitions, job.KIND) == (topic, 1, "s3_sink")
    assert (job.table.bucket, job.table.prefix, job.dataset.name) == ("b", "p/", "Txn")
    assert job.sink.connector.kind == "s3" and plan.read_topics(job) == (topic,)
    # not the dataset's offline table (still in the platform's bucket): another job kind
    [offline] = [j for j in jobs_of(bs) if isinstance(j, plan.OfflineJobSpec)]
    assert offline.table.bucket == "" and offline.table != job.table
    # the platform's own tables encode as before (no bucket), so their hashes are unchanged
    own = to_jsonable(plan.OfflineTable(job.dataset, "fd/offline/x/"))
    assert "bucket" not in own and to_jsonable(job.table)["bucket"] == "b"
    # the sink is no part of the dataset's identity: another location, the same topic
    other = compile_blueprints(EntityGraph.build(commit_spec("o", [lake("b", "q/")])))
    assert topic in {b.name for b in other.of_kind("topic")}
    assert job.name not in {j.name for j in jobs_of(other)}


def test_env_selection_drops_an_s3_sink_and_its_job() -> None:
    for env, n in (("prod", 1), ("dev", 0)):
        assert len(sink_jobs([lake("b", env=["prod"])], env=env)) == n


def test_s3_sinks_are_accepted_and_what_the_platform_cannot_write_is_refused() -> None:
    assert refusals([lake("sinks")]) == []

    def other(conn: Any, **kw: Any) -> Any:
        @meta(owner=OWNER)
        @sink(conn, **kw)
        @source(Webhook(name="wh").endpoint("txn"), disorder="14d", cdc="append")
        @dataset
        class Out:
            uid: int
            ts: datetime

        return Out

    snow = refusals([other(Snowflake(name="wh").table("t"), how="incremental")])
    assert [(e, w) for e, w, _ in snow] == [("Out", "sink snowflake(wh)")]
    assert "does not write" in snow[0][2]
    own = refusals([lake(get_settings().s3_bucket)])
    assert len(own) == 1 and "platform's own bucket" in own[0][2]
    renamed = refusals([lake("sinks", renames={"uid": "user"})])
    assert len(renamed) == 1 and "renames=" in renamed[0][2]
    path = S3(name="lake").bucket("sinks", path="a/b.csv", format="delta")
    assert any("path=" in m for _, _, m in refusals([other(path, how="incremental")]))

    # one Delta table holds one dataset's rows: two datasets, one location, is refused
    @meta(owner=OWNER)
    @sink(S3(name="lake").bucket("sinks", prefix="lake", format="delta"), how="incremental")
    @source(Kafka(name="k").topic("raw"), disorder="14d", cdc="append")
    @dataset
    class Again:
        uid: int
        ts: datetime

    both = refusals([lake("sinks", "lake/"), Again])
    assert len(both) == 1 and "one Delta table holds one dataset's rows" in both[0][2]


# --------------------------------------------------------------------------- services


def rows(start: int, n: int) -> pd.DataFrame:
    return pd.DataFrame({
        "uid": [start + i for i in range(n)],
        "amount": [float(start + i) / 4 for i in range(n)],
        "ts": [T0 + timedelta(hours=start + i) for i in range(n)],
    })  # fmt: skip


def read_sink(s: Settings, bucket: str, prefix: str) -> pd.DataFrame:
    """The Delta table at the sink's location, read by delta-rs (not the platform's reader)."""
    uri = f"s3://{bucket}/{prefix.rstrip('/')}"
    try:
        table = DeltaTable(uri, storage_options=storage_options(s))
    except Exception:  # noqa: BLE001 (no commit yet)
        return pd.DataFrame(columns=["uid", "amount", "ts", PARTITION, OFFSET])
    return pd.DataFrame(table.to_pyarrow_table().to_pydict())


def assert_exactly(got: pd.DataFrame, sent: pd.DataFrame, topic: list[tuple[int, int]]) -> None:
    """``got`` holds each row of ``sent`` once, each at the topic place it was read from
    (``topic``: the (partition, offset) of every row on the topic; a batch message holds
    several rows at one offset)."""
    assert len(got) == len(sent)
    places = sorted(zip(got[PARTITION].tolist(), got[OFFSET].tolist(), strict=True))
    assert places == sorted(topic)  # each topic row once
    got = got.sort_values("uid").reset_index(drop=True)
    assert got["uid"].tolist() == sent["uid"].tolist()
    assert got["amount"].tolist() == pytest.approx(sent["amount"].tolist())
    stamps = pd.to_datetime(got["ts"], utc=True).tolist()
    assert stamps == pd.to_datetime(sent["ts"], utc=True).tolist()


def _places(s: Settings, src: Any) -> list[tuple[int, int]]:
    """(partition, offset) of every row on the source job's output topic."""
    return [(p, o) for p, o, _ in read_topic(s, src.spec.output_topic, src.spec.partitions)]


@pytest.fixture
def sink_bucket(engine_settings: Settings) -> Any:
    s = engine_settings
    bucket = f"{s.namespace}-sink"
    client = s3_client(s)
    client.create_bucket(Bucket=bucket)
    yield bucket
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for o in page.get("Contents", []):
            client.delete_object(Bucket=bucket, Key=o["Key"])
    client.delete_bucket(Bucket=bucket)


@pytest.mark.services
def test_an_s3_sink_gets_every_row_once_across_a_writer_restart(
    engine_settings: Settings, sink_bucket: str
) -> None:
    s = engine_settings.with_(offline_flush_s=0.3)
    jobs = commit(s, [lake(sink_bucket)])
    src, snk = jobs["source:Txn"], jobs["s3_sink:Txn"]
    assert isinstance(snk.spec, plan.S3SinkJobSpec)
    assert (snk.spec.table.bucket, snk.spec.table.prefix) == (sink_bucket, "lake/txn/")
    first = rows(0, 40)
    with LocalClient(s) as c:
        assert c.log("wh", "txn", first).accepted == len(first)
    fleet = Fleet(s)
    fleet.start(src)
    writer = offline_writer(s, snk)
    try:
        wait_for(lambda: len(read_sink(s, sink_bucket, "lake/txn/")) >= 40, 90, "40 rows")
        threading.Event().wait(2.0)  # anything more would be a duplicate
        assert_exactly(read_sink(s, sink_bucket, "lake/txn/"), first, _places(s, src))
        writer.terminate()
        writer.join(30)

        # more rows while the writer is down; the restart resumes from the table's offsets
        more = rows(40, 25)
        with LocalClient(s) as c:
            assert c.log("wh", "txn", more).accepted == len(more)
        writer = offline_writer(s, snk)
        wait_for(lambda: len(read_sink(s, sink_bucket, "lake/txn/")) >= 65, 90, "65 rows")
        threading.Event().wait(2.0)
    finally:
        writer.terminate()
        writer.join(30)
        fleet.stop()
    assert_exactly(
        read_sink(s, sink_bucket, "lake/txn/"),
        pd.concat([first, more], ignore_index=True),
        _places(s, src),
    )
    # the platform's bucket holds no table for the sink: it is at the sink's location only
    listed = s3_client(s).list_objects_v2(Bucket=s.s3_bucket, Prefix=f"{s.namespace}/")
    assert not any("lake/txn" in o["Key"] for o in listed.get("Contents", []))


@pytest.mark.services
def test_a_missing_sink_bucket_fails_the_writer_naming_it(engine_settings: Settings) -> None:
    s = engine_settings
    jobs = commit(s, [lake(f"{s.namespace}-gone")])
    snk = jobs["s3_sink:Txn"]
    assert isinstance(snk.spec, plan.S3SinkJobSpec)
    writer = OfflineWriter(s, snk, "test")
    with pytest.raises(MissingSinkBucket, match=f"bucket '{s.namespace}-gone' does not exist"):
        writer.run(threading.Event(), lambda: None)
    # run by the runner, the same failure every start stops the job with that reason
    reason = run_forever(s, snk, 0, "test")
    assert reason is not None and f"bucket '{s.namespace}-gone' does not exist" in reason
    # the platform's own offline tables need no such bucket: theirs is the stack's
    spec = replace(snk.spec, table=replace(snk.spec.table, bucket=""))
    OfflineWriter(s, of_spec(snk.hash, spec), "test").check_bucket()


@pytest.mark.services
def test_the_real_commit_accepts_an_s3_sink_and_refuses_snowflake(
    engine_settings: Settings,
) -> None:
    s = engine_settings

    @meta(owner=OWNER)
    @sink(Snowflake(name="wh").table("rows"), how="incremental")
    @source(Webhook(name="wh").endpoint("txn"), disorder="14d", cdc="append")
    @dataset
    class Hook:
        uid: int
        ts: datetime

    with LocalClient(s) as c, pytest.raises(CommitRejected) as err:
        c.commit("snow", datasets=[Hook])
    text = str(err.value)
    assert "sink snowflake(wh)" in text and "does not write snowflake sinks" in text
    with LocalClient(s) as c:
        c.commit("lake", datasets=[lake(f"{s.namespace}-sink")])
    MockClient().commit("lake", datasets=[lake("b")])  # the mock accepts both, writing nothing
    MockClient().commit("snow", datasets=[Hook])
