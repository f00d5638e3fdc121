"""Test harness: commit a repo, produce rows, run runners in threads, read topics back."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pandas as pd
from confluent_kafka import Consumer, Producer, TopicPartition

from fennel_dagster.client import LocalClient
from fennel_dagster.engine.forking import runner_context
from fennel_dagster.engine.partitioning import partition_of_record
from fennel_dagster.engine.runner import Runner
from fennel_dagster.engine.supervisor import _runner_main
from fennel_dagster.metadata.db import connect
from fennel_dagster.metadata.registry import JobRow, list_jobs
from fennel_dagster.offline.table import OFFSET, PARTITION, OfflineTable
from fennel_dagster.ops.batches import rows_of
from fennel_dagster.ops.rows import dumps, to_records
from fennel_dagster.settings import Settings
from fennel_dagster.wire import plan
from tests.engine import repo


def commit(settings: Settings, datasets: list[Any]) -> dict[str, JobRow]:
    with LocalClient(settings) as c:
        c.commit("engine test", datasets=datasets)
    with connect(settings, settings.pg_schema) as conn:
        return {f"{j.kind}:{j.spec.dataset.name}": j for j in list_jobs(conn)}


def produce_raw(settings: Settings, topic: str, payloads: list[bytes], partitions: int = 4) -> None:
    p = Producer({"bootstrap.servers": settings.kafka_servers, "enable.idempotence": True})
    for i, v in enumerate(payloads):
        p.produce(topic, v, partition=i % partitions)
    assert p.flush(30) == 0


def produce_rows(
    settings: Settings,
    topic: str,
    records: list[dict[str, Any]],
    partitions: int = 4,
    by: str | None = None,
) -> None:
    """Rows into an internal dataset topic: by the row's hash, or by ``by`` (keeps a key's
    rows in one partition, in order — what crash tests compare against the mock)."""
    p = Producer({"bootstrap.servers": settings.kafka_servers, "enable.idempotence": True})
    for rec in records:
        raw = dumps(rec)
        key, part = partition_of_record(rec, [], partitions, raw)
        if by is not None:
            part = int(rec[by]) % partitions
        p.produce(topic, raw, key, partition=part)
    assert p.flush(30) == 0


def read_topic(
    settings: Settings,
    topic: str,
    partitions: int,
    expect: int | None = None,
    timeout: float = 60.0,
) -> list[tuple[int, int, dict[str, Any]]]:
    """Every committed row of ``topic``: (partition, offset, row)."""
    c = Consumer({"bootstrap.servers": settings.kafka_servers, "group.id": f"reader-{time.time_ns()}",
                  "isolation.level": "read_committed", "enable.auto.commit": False,
                  "enable.partition.eof": True, "auto.offset.reset": "earliest"})  # fmt: skip
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[tuple[int, int, dict[str, Any]]] = []
    eof: set[int] = set()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            if len(eof) == partitions and (expect is None or len(out) >= expect):
                break
            continue
        if m.error():
            eof.add(m.partition())
            if len(eof) == partitions and (expect is None or len(out) >= expect):
                break
            continue
        eof.discard(m.partition())
        # a batch message (ops.batches) holds many rows, each at the message's offset
        out += [(m.partition(), m.offset(), row) for row in rows_of(m.value())]
    c.close()
    return out


def raw_records(s: Settings, topic: str, partition: int = 0) -> list[bytes]:
    """Every committed value of one partition of ``topic``, as bytes."""
    c = Consumer({"bootstrap.servers": s.kafka_servers, "group.id": f"raw-{time.time_ns()}",
                  "isolation.level": "read_committed", "enable.partition.eof": True,
                  "auto.offset.reset": "earliest"})  # fmt: skip
    c.assign([TopicPartition(topic, partition, 0)])
    out = []
    while True:
        m = c.poll(5)
        if m is None or m.error():
            break
        out.append(m.value())
    c.close()
    return out


class Fleet:
    """Runners of some job partitions in threads of this process (tests only)."""

    def __init__(self, settings: Settings, owner: str = "test") -> None:
        self.settings = settings
        self.owner = owner
        self.threads: list[tuple[threading.Thread, threading.Event, Runner]] = []
        self.failures: list[BaseException] = []

    def start(self, job: JobRow, partitions: list[int] | None = None) -> None:
        for p in partitions if partitions is not None else range(job.partitions):
            stop = threading.Event()
            runner = Runner(self.settings, job, p, self.owner)

            def target(r: Runner = runner, s: threading.Event = stop) -> None:
                try:
                    r.run(s)
                except BaseException as e:  # noqa: BLE001
                    self.failures.append(e)

            t = threading.Thread(target=target, daemon=True)
            t.start()
            self.threads.append((t, stop, runner))

    def stop(self, allow: tuple[type[BaseException], ...] = ()) -> list[Runner]:
        for _, s, _ in self.threads:
            s.set()
        for t, _, _ in self.threads:
            t.join(60)
        runners = [r for _, _, r in self.threads]
        self.threads.clear()
        unexpected = [f for f in self.failures if not isinstance(f, allow)]
        assert not unexpected, unexpected
        return runners


def create_topic(settings: Settings, topic: str, partitions: int = 4) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": settings.kafka_servers})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(30)


def wait_for(cond: Callable[[], bool], timeout: float = 60.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def offline_writer(s: Settings, job: JobRow) -> Any:
    """An offline writer job in a process of its own (so a test can SIGKILL it)."""
    proc = runner_context().Process(
        target=_runner_main,
        args=(s, [(job.to_json(), 0)], "offline-test", 0, "", dict(os.environ)),
        daemon=True,
    )
    proc.start()
    return proc


def table_rows(table: OfflineTable) -> list[tuple[int, int]]:
    """(topic partition, offset) of every row of an offline table."""
    t = table.read([PARTITION, OFFSET]).to_pydict()
    return sorted(zip(t[PARTITION], t[OFFSET], strict=True))


def txn_with_history(s: Settings, ev: pd.DataFrame) -> tuple[list[Any], dict[str, JobRow]]:
    """Commit the engine repo (Txn -> Spend), put ``ev`` on Txn's topic and wait until Txn's
    offline table holds every row: the history a replay or backfill reads."""
    create_topic(s, f"{s.namespace}.raw")
    datasets = repo.graph(f"{s.namespace}.raw")
    jobs = commit(s, datasets)
    txn = jobs["offline:Txn"]
    assert isinstance(txn.spec, plan.OfflineJobSpec)
    produce_rows(s, txn.spec.input_topic, to_records(ev))
    proc = offline_writer(s, txn)
    try:
        table = OfflineTable(s, txn.spec.table)
        wait_for(lambda: len(table_rows(table)) >= len(ev), 90, "Txn's offline table")
    finally:
        proc.terminate()
        proc.join(30)
    return datasets, jobs


def engine_process(s: Settings, engine_id: str, log: str) -> subprocess.Popen[bytes]:
    """``fennel-dagster engine`` as an operator starts it: a process of its own (to SIGKILL)."""
    env = {**os.environ, **s.as_env()}
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "fennel_dagster.cli.main", "engine", "--id", engine_id],
            env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
