"""Postgres sources: Spark pulls a table by its cursor column every ``every=``, the engine's
source job applies the source's rules, each row reaches the dataset's topic once, and bad
rows, a missing column and missing credentials are reported by name (real Postgres, Kafka,
Spark)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from fennel_dagster import dataset, meta, source
from fennel_dagster.batch.pg_ingest import PostgresSourceError, check_columns, pull
from fennel_dagster.engine.supervisor import Supervisor
from fennel_dagster.settings import Settings
from fennel_dagster.sources import Postgres
from fennel_dagster.wire import plan
from tests.engine.harness import commit, read_topic, wait_for

pytestmark = pytest.mark.services
T0 = datetime(2026, 4, 1, tzinfo=UTC)


def repo(s: Settings, table: str, with_region: bool = False) -> list[Any]:
    crm = Postgres(name="crm", host=s.postgres_host, db_name=s.pg_db, port=s.pg_port)

    if with_region:

        @meta(owner="crm@example.com")
        @source(crm.table(table, cursor="id"), every="1s", cdc="append")
        @dataset
        class Orders:
            uid: int
            amount: float
            region: str
            ts: datetime

        return [Orders]

    @meta(owner="crm@example.com")
    @source(crm.table(table, cursor="id"), every="1s", cdc="append")
    @dataset
    class Orders:  # type: ignore[no-redef]
        uid: int
        amount: float
        ts: datetime

    return [Orders]


@pytest.fixture
def table(engine_settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    s = engine_settings
    monkeypatch.setenv("FENNEL_CONNECTION_CRM_USER", s.pg_user)
    monkeypatch.setenv("FENNEL_CONNECTION_CRM_PASSWORD", s.pg_password)
    schema = f"src_{s.namespace}"
    with psycopg.connect(s.pg_dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"CREATE TABLE {schema}.orders (id serial PRIMARY KEY, uid int, "
                     "amount double precision, ts timestamptz)")  # fmt: skip
    yield f"{schema}.orders"
    with psycopg.connect(s.pg_dsn(), autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


def _insert(s: Settings, table: str, rows: list[tuple[int, float | None, datetime]]) -> None:
    with psycopg.connect(s.pg_dsn(), autocommit=True) as conn:
        with conn.cursor() as cur:
            cur.executemany(f"INSERT INTO {table} (uid, amount, ts) VALUES (%s, %s, %s)", rows)


def test_a_postgres_table_is_pulled_by_its_cursor_and_each_row_arrives_once(
    engine_settings: Settings, table: str
) -> None:
    s = engine_settings.with_(engine_snapshot_interval_s=3600.0)
    first = [(i % 4, float(i), T0 + timedelta(minutes=i)) for i in range(30)]
    first.append((9, None, T0))  # amount is not optional: the source job rejects the row
    _insert(s, table, first)
    jobs = commit(s, repo(s, table))
    topic = jobs["source:Orders"].spec.output_topic  # type: ignore[union-attr]
    sup = Supervisor(s, engine_id="crm")
    t = threading.Thread(target=sup.serve, daemon=True)
    t.start()
    try:
        wait_for(lambda: len(read_topic(s, topic, 4, timeout=3)) >= 30, 240, "the first pull")
        _insert(s, table, [(i % 4, float(i), T0 + timedelta(hours=1, minutes=i))
                           for i in range(30, 50)])  # fmt: skip
        wait_for(lambda: len(read_topic(s, topic, 4, timeout=3)) >= 50, 120, "the next poll")
        rows = [r for _, _, r in read_topic(s, topic, 4, timeout=3)]
        err_topic = jobs["source:Orders"].spec.error_topic  # type: ignore[union-attr]
        errors = [r for _, _, r in read_topic(s, err_topic, 1, timeout=3)]
    finally:
        sup.stop()
        t.join(120)
    assert sorted(r["amount"] for r in rows) == [float(i) for i in range(50)]  # each row once
    assert len(errors) == 1 and "Orders.amount" in errors[0]["reason"], errors
    assert errors[0]["stage"] == "schema"


def test_a_missing_column_or_credentials_are_named_and_nothing_is_sent(
    engine_settings: Settings, table: str, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = engine_settings
    _insert(s, table, [(1, 2.0, T0)])
    jobs = commit(s, repo(s, table, with_region=True))
    job = jobs["pg_ingest:Orders"].spec
    assert isinstance(job, plan.PostgresIngestJobSpec)
    with pytest.raises(
        PostgresSourceError,
        match=(
            rf"source postgres\(crm\) of Orders: table '{table}' has no column for field "
            r"Orders.region; add the column to the table, or give the field a value with preproc="
        ),
    ):
        pull(spark, s, job)  # fmt: skip
    assert read_topic(s, job.inbox_topic, 4, timeout=3) == []  # nothing sent, nothing lost
    with psycopg.connect(s.pg_dsn(), autocommit=True) as conn:
        conn.execute(f"ALTER TABLE {table} ADD COLUMN region text DEFAULT 'eu'")
    assert "region" in check_columns(spark, job)
    report = pull(spark, s, job)
    assert (report.rows, report.cursor) == (1, 1)
    assert pull(spark, s, job).rows == 0  # the cursor moved past it
    monkeypatch.delenv("FENNEL_CONNECTION_CRM_USER")
    with pytest.raises(PostgresSourceError, match="set FENNEL_CONNECTION_CRM_USER"):
        pull(spark, s, job)
