"""HTTP sink delivery: an outbox partition of Debezium change events -> POSTs to the sink's
endpoint, at least once, in order.

The changes were written to the outbox exactly once by the sink's change job (the Kafka sink
job, ``engine.jobs.sink``); this loop reads them ``read_committed``, POSTs up to ``limit`` a
request as a JSON array, and commits the outbox offsets only after the endpoint took them,
in a Kafka transaction of the partition's own ``transactional.id`` (a stale deliverer is
fenced: it cannot commit over a newer one). A crash between a POST and its commit sends the
batch again, so each change carries ``payload.source.fennel.partition`` and ``.offset`` (its
outbox position), by which the receiver drops a repeat, as Fennel documents.

What the endpoint answers decides what happens to a batch:
- 2xx: delivered; the offsets are committed.
- 408, 425, 429, 5xx, or no answer (connection refused, timeout, TLS): the endpoint is
  unwell; the same batch is retried with exponential backoff (``Retry-After`` honoured),
  for as long as it takes. Nothing behind it moves, so order holds.
- 400, 413, 422: the endpoint refuses the content. The batch is split in halves until the
  changes it refuses alone are found; each goes to the dataset's error topic with the
  status and the answer's first bytes (stage ``sink``), in the same transaction as the
  offsets, and the rest are delivered. A refused change is recorded, never dropped.
- any other status (401, 403, 404, 3xx, ...): the sink is misconfigured, which no split
  mends; it is retried like an outage (at most once a minute) and logged until it is fixed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
from confluent_kafka import (
    OFFSET_STORED,
    Consumer,
    Message,
    Producer,
    TopicPartition,
)

from fennel_dagster.engine import kafka_clients
from fennel_dagster.engine.error_records import encode_error
from fennel_dagster.engine.failures import Fenced
from fennel_dagster.engine.messages import ErrorRecord
from fennel_dagster.engine.metrics import runner_metrics
from fennel_dagster.metadata.registry import JobRow
from fennel_dagster.settings import Settings
from fennel_dagster.wire import plan
from fennel_dagster.wire.http_endpoint import HttpEndpoint

log = logging.getLogger("fennel_dagster.engine.http_sink")

RETRY_STATUS = frozenset({408, 425, 429})  # and every 5xx
CONTENT_STATUS = frozenset({400, 413, 422})  # the content is refused: split the batch
BACKOFF_MAX_S = 30.0
MISCONFIGURED_MAX_S = 60.0
ANSWER_CHARS = 500  # of an answer's body kept in an error record or a log line
REQUEST_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Refused:
    """What the endpoint answered a request it did not take (None: it gave no answer)."""

    status: int | None
    detail: str
    retry_after_s: float | None = None

    @property
    def content(self) -> bool:
        return self.status in CONTENT_STATUS

    @property
    def outage(self) -> bool:
        return self.status is None or self.status in RETRY_STATUS or self.status >= 500


def with_position(value: bytes, partition: int, offset: int) -> dict[str, Any]:
    """A change event as the endpoint gets it: its outbox position under
    ``payload.source.fennel`` (the receiver's de-duplication key)."""
    event: dict[str, Any] = orjson.loads(value)
    payload = event.setdefault("payload", {})
    source = payload.get("source") or {}
    payload["source"] = {**source, "fennel": {"partition": partition, "offset": offset}}
    return event


def backoff_s(attempt: int, refused: Refused) -> float:
    """Exponential from 0.5 s, capped; a misconfigured sink waits up to a minute; an
    endpoint's ``Retry-After`` is honoured within the same caps."""
    cap = BACKOFF_MAX_S if refused.outage else MISCONFIGURED_MAX_S
    base = min(cap, 0.5 * 2 ** min(attempt, 16))
    return min(max(base, refused.retry_after_s or 0.0), MISCONFIGURED_MAX_S)


def _retry_after(answer: httpx.Response) -> float | None:
    try:
        return float(answer.headers.get("retry-after", ""))
    except ValueError:
        return None  # an HTTP date, or nothing: the backoff decides


class HttpDelivery:
    def __init__(
        self,
        settings: Settings,
        job: JobRow,
        partition: int,
        client: httpx.Client | None = None,
    ) -> None:
        assert isinstance(job.spec, plan.HttpSinkJobSpec), job.name
        self.settings = settings
        self.job = job
        self.spec: plan.HttpSinkJobSpec = job.spec
        self.partition = partition
        self.target = HttpEndpoint.of(job.spec.sink.connector)
        self.where = f"{self.target.describe()} of {job.spec.dataset.name}"
        self.client = client or httpx.Client(
            timeout=REQUEST_TIMEOUT_S, verify=self.target.verify(), follow_redirects=False
        )
        self.headers = {"content-type": "application/json", **dict(self.target.headers)}
        self.txn_id = f"{job.name}.p{partition}"
        self.delivered = 0  # changes the endpoint took
        self.refused = 0  # changes it refused alone, now on the error topic
        self.requests = 0
        self.retries = 0
        self.metrics = runner_metrics()  # the engine's: messages in, changes out, refused

    def run(self, stop: threading.Event, beat: Callable[[], None]) -> None:
        producer = kafka_clients.transactional_producer(self.settings, self.txn_id)
        try:
            producer.init_transactions(60)  # fences an older deliverer of this partition
        except Exception as e:
            raise Fenced(f"{self.txn_id}: init_transactions failed: {e}") from e
        c = kafka_clients.consumer(self.settings, self.txn_id)
        c.assign([TopicPartition(self.spec.input_topic, self.partition, OFFSET_STORED)])
        log.info("%s: delivering outbox partition %d to %s", self.job.name, self.partition,
                 self.target.url)  # fmt: skip
        last_beat = 0.0

        def beating() -> None:
            nonlocal last_beat
            if time.monotonic() - last_beat > 2.0:
                self._measure_lag(c)
                beat()
                last_beat = time.monotonic()

        try:
            while not stop.is_set():
                beating()
                batch = [m for m in c.consume(self.target.limit, 0.5) if m.error() is None]
                if not batch:
                    continue
                started = time.monotonic()
                errors = self._deliver(batch, stop, beating)
                if errors is None:
                    return  # stopped mid-retry: the batch goes again on the next start
                self._commit(producer, c, batch[-1], errors)
                self._count(len(batch), len(errors), time.monotonic() - started)
        finally:
            c.close()
            self.client.close()

    def _count(self, changes: int, refused: int, seconds: float) -> None:
        m, part = self.metrics, str(self.partition)
        m.messages.labels(self.job.name, part).inc(changes)
        m.outputs.labels(self.job.name, part).inc(changes - refused)
        m.errors.labels(self.job.name, part).inc(refused)
        m.batch_seconds.labels(self.job.name).observe(seconds)

    def _measure_lag(self, c: Consumer) -> None:
        behind = kafka_clients.lag(c)  # outbox changes not yet delivered
        if behind is not None:
            self.metrics.lag.labels(self.job.name, str(self.partition)).set(behind)

    def _deliver(
        self, batch: list[Message], stop: threading.Event, beat: Callable[[], None]
    ) -> list[ErrorRecord] | None:
        """POST ``batch``; the changes the endpoint refuses alone, as error records (None:
        ``stop`` was set before the endpoint took it)."""
        events = [with_position(m.value() or b"{}", self.partition, m.offset() or 0)
                  for m in batch]  # fmt: skip
        refused = self._post_until_taken_or_refused(events, stop, beat)
        if refused is None:
            self.delivered += len(batch)
            return []
        if isinstance(refused, _Stopped):
            return None
        if len(batch) == 1:
            self.refused += 1
            return [self._error_record(batch[0], refused)]
        half = len(batch) // 2
        errors: list[ErrorRecord] = []
        for part in (batch[:half], batch[half:]):  # in order: a key's changes stay in order
            found = self._deliver(part, stop, beat)
            if found is None:
                return None
            errors += found
        return errors

    def _post_until_taken_or_refused(
        self, events: list[dict[str, Any]], stop: threading.Event, beat: Callable[[], None]
    ) -> Refused | _Stopped | None:
        """None once the endpoint takes ``events``; its refusal if it refuses their content;
        retries every other failure until it is over or ``stop`` is set."""
        body = orjson.dumps(events)
        attempt = 0
        while not stop.is_set():
            beat()
            refused = self._post(body)
            if refused is None or refused.content:
                return refused
            wait = backoff_s(attempt, refused)
            attempt += 1
            self.retries += 1
            log.warning("%s: POST of %d changes %s; retrying in %.1fs", self.where, len(events),
                        _say(refused), wait)  # fmt: skip
            deadline = time.monotonic() + wait
            while not stop.wait(min(1.0, max(0.0, deadline - time.monotonic()))):
                beat()
                if time.monotonic() >= deadline:
                    break
        return _Stopped()

    def _post(self, body: bytes) -> Refused | None:
        self.requests += 1
        try:
            answer = self.client.post(self.target.url, content=body, headers=self.headers)
        except httpx.HTTPError as e:
            return Refused(None, f"{type(e).__name__}: {e}")
        if answer.is_success:
            return None
        return Refused(answer.status_code, answer.text[:ANSWER_CHARS], _retry_after(answer))

    def _error_record(self, msg: Message, refused: Refused) -> ErrorRecord:
        raw = msg.value() or b""
        return ErrorRecord(
            dataset=self.spec.dataset.name,
            stage="sink",
            reason=(
                f"{self.where} refused this change ({_say(refused)}); the other changes of its "
                "batch were delivered. Fix the change or the endpoint and re-send the payload"
            ),
            topic=msg.topic() or self.spec.input_topic,
            partition=msg.partition() or 0,
            offset=msg.offset() or 0,
            payload=raw,
            where=f"sink http({self.target.connection})",
        )

    def _commit(
        self, producer: Producer, c: Consumer, last: Message, errors: list[ErrorRecord]
    ) -> None:
        """The batch's offsets, with its refused changes on the error topic, in one
        transaction: a crash before it sends the batch again, never loses a refusal."""
        producer.begin_transaction()
        for err in errors:
            producer.produce(self.spec.error_topic, encode_error(err))
        done = TopicPartition(self.spec.input_topic, self.partition, (last.offset() or 0) + 1)
        producer.send_offsets_to_transaction([done], c.consumer_group_metadata(), 60)
        producer.commit_transaction(60)


class _Stopped:
    """The loop was asked to stop before the endpoint took a batch."""


def _say(refused: Refused) -> str:
    if refused.status is None:
        return f"got no answer: {refused.detail}"
    detail = f": {refused.detail}" if refused.detail else ""
    return f"answered {refused.status}{detail}"
