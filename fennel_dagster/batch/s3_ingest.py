"""S3 sources on Spark: new files under a prefix -> the source's inbox topic, once per file.

Spark reads the files (Parquet, CSV, JSON lines, or a Delta table's data files) and each
row becomes one JSON message on the source's inbox topic; the engine's source job takes it
from there exactly as it takes a Kafka source's messages (preproc, where, schema and
restriction checks, disorder, cdc), so an S3 row and a Kafka row meet the same rules and
their rejects reach the same error topic with the same stage and reason.

Exactly once per file: the rows of one file are produced by one Spark task in one Kafka
transaction, together with the file's entry on the source's ledger topic (key: path and
ETag). The transactional id is the file's, so a retried task fences its predecessor, and it
reads the ledger after fencing: a file whose entry is committed is never sent again. A file
that cannot be read goes to the error topic (stage ``read``) with its ledger entry, so it is
reported once and re-read only when it changes (a new ETag).
"""

from __future__ import annotations

import hashlib
import json
import logging
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
from fennel_dagster.errors import ExecutionError
from fennel_dagster.ops.rows import base_type
from fennel_dagster.s3 import s3_client
from fennel_dagster.settings import Settings
from fennel_dagster.wire import plan, spec

log = logging.getLogger("fennel_dagster.batch.s3")

FORMATS = ("csv", "json", "parquet", "delta")


class S3SourceError(ExecutionError):
    """An S3 source that cannot be read at all (a missing prefix, an unknown format)."""


@dataclass(frozen=True)
class S3File:
    path: str  # the object key
    etag: str
    size: int

    @property
    def ledger_key(self) -> str:
        return f"{self.path}@{self.etag}"


@dataclass
class IngestReport:
    files: int = 0
    rows: int = 0
    unreadable: int = 0


def where(job: plan.S3IngestJobSpec) -> str:
    c = job.source.connector
    return f"source s3({c.name}) of {job.dataset.name}"


def list_files(settings: Settings, job: plan.S3IngestJobSpec) -> list[S3File]:
    """The source's data files, oldest name first (date-named files ingest in time order)."""
    cfg = dict(job.source.connector.config)
    bucket = str(cfg["bucket"])
    client = s3_client(settings)
    if cfg.get("path"):
        key = str(cfg["path"])
        try:
            head = client.head_object(Bucket=bucket, Key=key)
        except client.exceptions.ClientError as e:
            raise S3SourceError(
                f"{where(job)}: s3://{bucket}/{key} cannot be read ({e}); check the bucket and "
                "path= in @source (and that the connection can read it)"
            ) from e
        return [S3File(key, head["ETag"].strip('"'), head["ContentLength"])]
    prefix = str(cfg.get("prefix") or "")
    files: list[S3File] = []
    token: dict[str, Any] = {}
    try:
        while True:
            page = client.list_objects_v2(Bucket=bucket, Prefix=prefix, **token)
            for o in page.get("Contents", []):
                name = o["Key"].rsplit("/", 1)[-1]
                if o["Size"] and not name.startswith(("_", ".")) and "/_delta_log/" not in o["Key"]:
                    files.append(S3File(o["Key"], o["ETag"].strip('"'), o["Size"]))
            if not page.get("IsTruncated"):
                break
            token = {"ContinuationToken": page["NextContinuationToken"]}
    except client.exceptions.NoSuchBucket as e:
        raise S3SourceError(
            f"{where(job)}: bucket {bucket!r} does not exist; fix bucket= in @source"
        ) from e
    if not files:
        raise S3SourceError(
            f"{where(job)}: no files under s3://{bucket}/{prefix}; check prefix= in @source "
            "(the source keeps polling and ingests files once they appear)"
        )
    return sorted(files, key=lambda f: f.path)


def sent_files(servers: str, topic: str) -> set[str]:
    """The ledger keys (files) committed so far."""
    return {key.decode() for key in read_ledger(servers, topic)}


def ingest(
    spark: Any, settings: Settings, job: plan.S3IngestJobSpec, files: list[S3File]
) -> IngestReport:
    """Send ``files`` (those not in the ledger) to the inbox; one Spark job."""

    done = sent_files(settings.kafka_servers, job.ledger_topic)
    todo = [f for f in files if f.ledger_key not in done]
    report = IngestReport()
    if not todo:
        return report
    cfg = dict(job.source.connector.config)
    fmt = str(cfg.get("format") or "csv").lower()
    if fmt not in FORMATS:
        raise S3SourceError(f"{where(job)}: format {fmt!r} is not one of {', '.join(FORMATS)}")
    bucket = str(cfg["bucket"])
    by_uri = {f"s3a://{bucket}/{f.path}": f for f in todo}
    numbers = _numeric_fields(job.dataset) if fmt == "csv" else {}
    send = _sender(settings, job, {u: f.ledger_key for u, f in by_uri.items()}, numbers)
    try:
        rows = _messages(spark, fmt, cfg, list(by_uri))
        parts = max(1, min(len(todo), 64))
        out = rows.repartition(parts, "file").sortWithinPartitions("file")
        sent = out.mapInPandas(send, "file string, rows long").collect()  # one row per file
    except Exception as e:  # noqa: BLE001 - a file Spark cannot read: find it, one by one
        if len(by_uri) == 1:
            (uri,) = by_uri
            _unreadable(settings, job, by_uri[uri], uri, e)
            report.unreadable += 1
            return report
        log.warning("%s: reading %d files failed (%s); retrying one by one",
                    where(job), len(by_uri), type(e).__name__)  # fmt: skip
        for f in todo:
            one = ingest(spark, settings, job, [f])
            report.files += one.files
            report.rows += one.rows
            report.unreadable += one.unreadable
        return report
    report.files = len(sent)
    report.rows = sum(int(r["rows"]) for r in sent)
    # files Spark returned no rows for (empty files) still get their ledger entry
    for uri in set(by_uri) - {r["file"] for r in sent}:
        _send_file(settings.kafka_servers, job.name, job.inbox_topic, job.inbox_partitions,
                   job.ledger_topic, by_uri[uri].ledger_key, [])  # fmt: skip
        report.files += 1
    return report


def _messages(spark: Any, fmt: str, cfg: dict[str, Any], uris: list[str]) -> Any:
    """(file, value): one JSON message per row. JSON lines go as they are (the source job
    parses them, as it parses a Kafka message); CSV cells as text (typed in ``_sender`` by
    the dataset's schema: a file-wide inferred type would turn one bad cell into a string
    column); Parquet rows with their own types."""
    from pyspark.sql import functions as F  # noqa: N812

    if fmt == "json":
        lines = spark.read.text(uris)
        return lines.where(F.trim("value") != "").select(
            F.input_file_name().alias("file"), F.col("value")
        )
    if fmt == "csv":
        sep = str(cfg.get("delimiter") or ",")
        df = spark.read.option("header", True).option("inferSchema", False).option("sep", sep)
        df = df.csv(uris)
    else:
        df = spark.read.parquet(*uris)  # parquet, and a Delta table's data files (append-only)
    cols = [F.col(f"`{c}`") for c in df.columns]
    return df.select(
        F.input_file_name().alias("file"),
        F.to_json(F.struct(*cols), {"ignoreNullFields": "false"}).alias("value"),
    )


def _numeric_fields(ds: spec.DatasetSpec) -> dict[str, str]:
    """CSV cells to type: field -> "int" | "float" | "bool" (others stay text)."""
    out = {}
    for f in ds.fields:
        t = base_type(f.dtype)
        if isinstance(t, spec.IntType):
            out[f.name] = "int"
        elif isinstance(t, spec.FloatType):
            out[f.name] = "float"
        elif isinstance(t, spec.BoolType):
            out[f.name] = "bool"
    return out


def _typed_cell(value: Any, kind: str) -> Any:
    """A CSV cell as its field's type; a cell that is not one stays text, so the source's
    schema check reports it with its value."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    try:
        if kind == "int":
            return int(text)
        if kind == "float":
            return float(text)
        if text.lower() in ("true", "false"):
            return text.lower() == "true"
    except ValueError:
        pass
    return value


def _sender(
    settings: Settings, job: plan.S3IngestJobSpec, keys: dict[str, str], numbers: dict[str, str]
) -> Callable[[Iterator[pd.DataFrame]], Iterator[pd.DataFrame]]:
    """The task body: per file, its rows and its ledger entry in one Kafka transaction."""
    servers, inbox, parts = settings.kafka_servers, job.inbox_topic, job.inbox_partitions
    ledger, name = job.ledger_topic, job.name

    def send(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        current: str | None = None
        buffered: list[bytes] = []
        done: list[tuple[str, int]] = []
        for pdf in batches:
            for file, value in zip(pdf["file"].tolist(), pdf["value"].tolist(), strict=True):
                if file != current:
                    if current is not None:
                        done.append((current, _send_file(servers, name, inbox, parts, ledger,
                                                         keys[current], buffered)))  # fmt: skip
                    current, buffered = file, []
                if numbers:
                    row = json.loads(value)
                    for field_name, kind in numbers.items():
                        if field_name in row:
                            row[field_name] = _typed_cell(row[field_name], kind)
                    value = json.dumps(row)
                buffered.append(value.encode())
        if current is not None:
            done.append((current, _send_file(servers, name, inbox, parts, ledger,
                                             keys[current], buffered)))  # fmt: skip
        yield pd.DataFrame(done, columns=["file", "rows"])

    return send


def _send_file(
    servers: str, job: str, inbox: str, parts: int, ledger: str, key: str, rows: list[bytes]
) -> int:
    p = Producer({
        "bootstrap.servers": servers, "enable.idempotence": True, "linger.ms": 5,
        "transactional.id": f"{job}:{hashlib.sha1(key.encode()).hexdigest()[:20]}",
        "transaction.timeout.ms": 120_000,
    })  # fmt: skip
    p.init_transactions(30)  # fences an earlier attempt at this file, completes or aborts it
    if key in sent_files(servers, ledger):
        return 0  # an earlier attempt committed it
    p.begin_transaction()
    for i, raw in enumerate(rows):
        p.produce(inbox, raw, partition=inbox_partition(raw, i, parts))
        if i % 10_000 == 9_999:
            p.poll(0)
    p.produce(ledger, json.dumps({"rows": len(rows)}).encode(), key.encode(), partition=0)
    p.commit_transaction(120)
    return len(rows)


def inbox_partition(raw: bytes, i: int, parts: int) -> int:
    """Rows spread over the inbox partitions, the same way on every attempt."""
    return (hashlib.blake2b(raw, digest_size=4).digest()[0] + i) % parts


def _reason(e: Exception) -> str:
    """The telling line of a Spark/Py4J error: its error class, else its root cause."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    for pattern in (r"\[[A-Z_.]+\]", r"^Caused by: "):
        hit = next((ln for ln in lines if re.search(pattern, ln)), None)
        if hit:
            return re.sub(r"^Caused by: [\w.$]+: ", "", hit)[:500]
    return (lines[0] if lines else type(e).__name__)[:500]


def _unreadable(
    settings: Settings, job: plan.S3IngestJobSpec, f: S3File, uri: str, e: Exception
) -> None:
    """Report a file Spark cannot read on the error topic, with its ledger entry."""
    reason = _reason(e)
    record = {
        "dataset": job.dataset.name, "stage": "read", "where": where(job),
        "reason": f"{where(job)}: {uri} cannot be read as "
                  f"{dict(job.source.connector.config).get('format')}: {reason}; "
                  "fix or replace the file (a changed file is read again)",
        "source": {"topic": uri, "partition": 0, "offset": 0}, "payload": "", "row": None,
    }  # fmt: skip
    p = Producer({
        "bootstrap.servers": settings.kafka_servers, "enable.idempotence": True,
        "transactional.id": f"{job.name}:{hashlib.sha1(f.ledger_key.encode()).hexdigest()[:20]}",
    })  # fmt: skip
    p.init_transactions(30)
    if f.ledger_key in sent_files(settings.kafka_servers, job.ledger_topic):
        return
    p.begin_transaction()
    p.produce(job.error_topic, json.dumps(record, sort_keys=True).encode(), partition=0)
    p.produce(job.ledger_topic, json.dumps({"unreadable": record["reason"]}).encode(),
              f.ledger_key.encode(), partition=0)  # fmt: skip
    p.commit_transaction(60)
    log.error("%s", record["reason"])


class S3Poller:
    """The runner of an S3 source: lists the prefix every ``every`` (default 60 s) and sends
    new files with Spark. Keeps one Spark session for its life."""

    def __init__(self, settings: Settings, job: plan.S3IngestJobSpec, spark: Any) -> None:
        self.settings, self.job, self.spark = settings, job, spark
        self.total = IngestReport()

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
                files = list_files(self.settings, self.job)
            except S3SourceError as e:
                log.warning("%s", e)
                files = []
            if files:
                r = ingest(self.spark, self.settings, self.job, files)
                end.saw(r.files, clock())
                self.total.files += r.files
                self.total.rows += r.rows
                if r.files:
                    log.info("%s: %d file(s), %d row(s) sent", where(self.job), r.files, r.rows)
            stop.wait(every)
