"""Postgres sources on Spark: a table's rows past its cursor -> the source's inbox topic.

Every ``every`` (default 60 s) Spark pulls ``SELECT * FROM <table> WHERE <cursor> > <last>
ORDER BY <cursor>`` over JDBC (the stack's Postgres driver); each row becomes one JSON
message on the inbox, which the engine's source job reads as it reads a Kafka topic (preproc,
where, schema and restriction checks, disorder, cdc; rejects to the error topic with stage
and reason). So a Postgres row and a Kafka row meet the same rules.

Exactly once: one Spark task sends the pull in order, in Kafka transactions of whole cursor
values (a chunk never splits rows that share a cursor value, since the next pull starts
*after* the last one), each with the cursor it reached on the source's compacted ledger
topic. The transactional id is the source's, so a retried task fences its predecessor and
then skips what the ledger says is sent. Rows committed later with a cursor below one already
pulled are not seen: use a cursor the database sets at commit (a sequence, ``updated_at``
from a trigger) for tables written concurrently.

Credentials never enter the IR: ``FENNEL_CONNECTION_<NAME>_USER`` and ``..._PASSWORD`` give
those of the connection named ``<NAME>`` (``Postgres(name=...)``).
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pandas as pd
from confluent_kafka import Producer

from fennel_dagster.batch.exhaustion import Exhaustion
from fennel_dagster.batch.ledger import read_ledger
from fennel_dagster.batch.s3_ingest import inbox_partition
from fennel_dagster.errors import ExecutionError
from fennel_dagster.settings import Settings
from fennel_dagster.wire import plan, spec

log = logging.getLogger("fennel_dagster.batch.postgres")

CHUNK_ROWS = 20_000  # rows per Kafka transaction (rounded up to a whole cursor value)
LEDGER_KEY = b"cursor"


class PostgresSourceError(ExecutionError):
    """A Postgres source that cannot be pulled (no credentials, a missing table or column)."""


@dataclass
class PullReport:
    rows: int = 0
    chunks: int = 0
    cursor: Any = None


def where(job: plan.PostgresIngestJobSpec) -> str:
    c = job.source.connector
    return f"source postgres({c.name}) of {job.dataset.name}"


def credentials(job: plan.PostgresIngestJobSpec) -> tuple[str, str]:
    name = re.sub(r"[^A-Za-z0-9]", "_", job.source.connector.name).upper()
    user = os.environ.get(f"FENNEL_CONNECTION_{name}_USER")
    password = os.environ.get(f"FENNEL_CONNECTION_{name}_PASSWORD", "")
    if not user:
        raise PostgresSourceError(
            f"{where(job)}: no credentials for connection {job.source.connector.name!r}; set "
            f"FENNEL_CONNECTION_{name}_USER and FENNEL_CONNECTION_{name}_PASSWORD for the engine"
        )
    return user, password


def _jdbc(spark: Any, job: plan.PostgresIngestJobSpec, query: str) -> Any:
    cfg = dict(job.source.connector.config)
    user, password = credentials(job)
    url = f"jdbc:postgresql://{cfg['host']}:{int(cfg.get('port') or 5432)}/{cfg['db_name']}"
    return (spark.read.format("jdbc").option("url", url).option("driver", "org.postgresql.Driver")
            .option("user", user).option("password", password).option("fetchsize", 10_000)
            .option("query", query).load())  # fmt: skip


def _ident(name: str) -> str:
    """A (possibly schema-qualified) identifier, quoted."""
    return ".".join('"' + part.replace('"', '""') + '"' for part in name.split("."))


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int | float):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"


def check_columns(spark: Any, job: plan.PostgresIngestJobSpec) -> list[str]:
    """The table's columns; a dataset field the table (and preproc) cannot give is an error
    naming the source, the dataset and the field."""
    cfg = dict(job.source.connector.config)
    table, cursor = str(cfg["table"]), str(cfg["cursor"])
    try:
        columns = list(_jdbc(spark, job, f"SELECT * FROM {_ident(table)} WHERE FALSE").columns)
    except Exception as e:  # noqa: BLE001 - Py4J wraps the driver's error: keep its text
        text = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise PostgresSourceError(
            f"{where(job)}: table {table!r} cannot be read: {text[:300]}"
        ) from e
    given = set(columns) | {name for name, _ in job.source.preproc}
    missing = [f.name for f in job.dataset.fields if f.name not in given
               and not _optional(job, f.name)]  # fmt: skip
    if cursor not in columns:
        raise PostgresSourceError(
            f"{where(job)}: table {table!r} has no cursor column {cursor!r}; fix cursor= in "
            f"{job.source.connector.name}.table(...) (columns: {', '.join(columns)})"
        )
    if missing:
        raise PostgresSourceError(
            f"{where(job)}: table {table!r} has no column for field "
            f"{', '.join(f'{job.dataset.name}.{m}' for m in missing)}; add the column to the "
            "table, or give the field a value with preproc= in @source"
        )
    return columns


def _optional(job: plan.PostgresIngestJobSpec, field: str) -> bool:
    f = next(f for f in job.dataset.fields if f.name == field)
    return isinstance(f.dtype, spec.OptionalType)


def read_cursor(servers: str, topic: str) -> Any:
    """The cursor the ledger says is sent (None: nothing yet)."""
    entry = read_ledger(servers, topic).get(LEDGER_KEY)
    return None if entry is None else json.loads(entry).get("cursor")


def pull(spark: Any, settings: Settings, job: plan.PostgresIngestJobSpec) -> PullReport:
    """Send the rows past the ledger's cursor to the inbox; one Spark job (one task, in
    cursor order)."""
    from pyspark.sql import functions as F  # noqa: N812 - the PySpark convention

    cfg = dict(job.source.connector.config)
    table, cursor = str(cfg["table"]), str(cfg["cursor"])
    columns = check_columns(spark, job)
    last = read_cursor(settings.kafka_servers, job.ledger_topic)
    condition = "" if last is None else f" WHERE {_ident(cursor)} > {_literal(last)}"
    df = _jdbc(spark, job, f"SELECT * FROM {_ident(table)}{condition}")
    rows = df.select(
        F.col(f"`{cursor}`").alias("__cursor"),
        F.to_json(F.struct(*[F.col(f"`{c}`") for c in columns]), {"ignoreNullFields": "false"})
        .alias("value"),
    )  # fmt: skip
    ordered = rows.coalesce(1).sortWithinPartitions("__cursor")
    send = _sender(settings, job, cursor)
    out = ordered.mapInPandas(send, "rows long, chunks long, cursor string").collect()
    report = PullReport()
    for r in out:
        report.rows += int(r["rows"])
        report.chunks += int(r["chunks"])
        if r["cursor"] is not None:
            report.cursor = json.loads(r["cursor"])
    return report


def _sender(
    settings: Settings, job: plan.PostgresIngestJobSpec, cursor: str
) -> Callable[[Iterator[pd.DataFrame]], Iterator[pd.DataFrame]]:
    servers, inbox, parts, ledger = (
        settings.kafka_servers, job.inbox_topic, job.inbox_partitions, job.ledger_topic,
    )  # fmt: skip
    txn_id = f"{job.name}:pull"

    def send(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        p = _producer(servers, txn_id)  # fences an earlier attempt at this pull
        sent = read_cursor(servers, ledger)  # what an earlier attempt already committed
        rows = chunks = 0
        pending: list[bytes] = []
        reached: Any = None
        held: Any = None
        for pdf in batches:
            for value, raw in zip(pdf["__cursor"].tolist(), pdf["value"].tolist(), strict=True):
                current = _jsonable(value)
                if sent is not None and not _after(current, sent):
                    continue
                if pending and current != held and len(pending) >= CHUNK_ROWS:
                    _commit(p, inbox, parts, ledger, pending, held)
                    rows, chunks, pending = rows + len(pending), chunks + 1, []
                    reached = held
                pending.append(raw.encode())
                held = current
        if pending:
            _commit(p, inbox, parts, ledger, pending, held)
            rows, chunks, reached = rows + len(pending), chunks + 1, held
        yield pd.DataFrame([{"rows": rows, "chunks": chunks,
                             "cursor": None if reached is None else json.dumps(reached)}])  # fmt: skip

    return send


def _producer(servers: str, txn_id: str) -> Producer:
    """Module-level, so Spark pickles the task by reference to it (not the C type itself)."""
    p = Producer({"bootstrap.servers": servers, "enable.idempotence": True, "linger.ms": 5,
                  "transactional.id": txn_id, "transaction.timeout.ms": 120_000})  # fmt: skip
    p.init_transactions(30)
    return p


def _jsonable(value: Any) -> Any:
    """A cursor value as the ledger keeps it: numbers as numbers, instants as ISO text."""
    if isinstance(value, pd.Timestamp):
        ts = value.tz_localize("UTC") if value.tzinfo is None else value.tz_convert("UTC")
        return ts.isoformat()
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return value


def _after(value: Any, sent: Any) -> bool:
    if isinstance(value, str) and isinstance(sent, str) and "T" in value and "T" in sent:
        return pd.Timestamp(value) > pd.Timestamp(sent)
    return bool(value > sent)


def _commit(
    p: Producer, inbox: str, parts: int, ledger: str, rows: list[bytes], cursor: Any
) -> None:
    p.begin_transaction()
    for i, raw in enumerate(rows):
        p.produce(inbox, raw, partition=inbox_partition(raw, i, parts))
        if i % 10_000 == 9_999:
            p.poll(0)
    p.produce(ledger, json.dumps({"cursor": cursor, "rows": len(rows)}).encode(), LEDGER_KEY,
              partition=0)  # fmt: skip
    p.commit_transaction(120)


class PostgresPoller:
    """The runner of a Postgres source: pulls every ``every`` (default 60 s) with Spark."""

    def __init__(self, settings: Settings, job: plan.PostgresIngestJobSpec, spark: Any) -> None:
        self.settings, self.job, self.spark = settings, job, spark
        self.total = PullReport()

    def run(
        self,
        stop: threading.Event,
        beat: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        every = float(self.job.source.every or 60)
        end = Exhaustion(self.job.source, clock(), where(self.job))
        while not stop.is_set():
            beat()
            if end.exhausted(clock()):
                stop.wait(every)
                continue
            try:
                r = pull(self.spark, self.settings, self.job)
            except PostgresSourceError as e:
                log.error("%s", e)  # reported each poll until fixed; nothing is lost
            else:
                end.saw(r.rows, clock())
                self.total.rows += r.rows
                if r.rows:
                    log.info("%s: %d row(s) sent, cursor at %s", where(self.job), r.rows, r.cursor)
            stop.wait(every)
