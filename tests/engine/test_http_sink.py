"""HTTP sinks: a dataset's changes POSTed to an endpoint as Debezium JSON, at least once.

The unit tests cover the declaration (Fennel's rules), the compiled jobs (a change job into
an outbox topic, a delivery job per outbox partition), the commit's rules (a secret host, a
URL that is none, a health check that fails) and the delivery's pure parts. The services
tests run the jobs on the real broker against a real HTTP server in this process: an
endpoint that fails, rate-limits and refuses one change still ends with every change
delivered once its repeats are dropped by their outbox position (``source.fennel``), in
order per key, and the refused change on the dataset's error topic; so does a fleet whose
runners, the deliverers included, are SIGKILLed again and again.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field as dc_field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from prometheus_client import REGISTRY

from fennel_dagster import dataset, field, meta, source
from fennel_dagster.client import LocalClient
from fennel_dagster.commit.compiler import compile_blueprints, jobs_of
from fennel_dagster.commit.errors import CommitRejected
from fennel_dagster.commit.executable import PLATFORM_RULES
from fennel_dagster.commit.graph import EntityGraph
from fennel_dagster.commit.validate import validate
from fennel_dagster.declare import commit_spec
from fennel_dagster.declare.errors import DeclarationError
from fennel_dagster.engine.error_records import decode_error
from fennel_dagster.engine.http_sink import HttpDelivery, Refused, backoff_s, with_position
from fennel_dagster.engine.supervisor import Supervisor
from fennel_dagster.integrations.aws import Secret
from fennel_dagster.metadata.registry import JobRow
from fennel_dagster.settings import Settings
from fennel_dagster.sources import HTTP, Certificate, Kafka, sink
from fennel_dagster.wire import plan
from fennel_dagster.wire.http_endpoint import HttpEndpoint
from tests.engine.chaos import kill_all, kill_at_random
from tests.engine.harness import Fleet, commit, create_topic, wait_for
from tests.engine.test_kafka_sink import produce_changes, row

T0 = datetime(2026, 1, 1, tzinfo=UTC)
OWNER = "sinks@example.com"


# --------------------------------------------------------------------------- a receiver


@dataclass
class Receiver:
    """A real HTTP endpoint: answers ``/health``, records every POST to ``/changes``; its
    ``script`` of statuses is answered first (one per request), and a batch holding a
    change whose name is ``refuse`` gets a 400."""

    server: ThreadingHTTPServer
    posts: list[tuple[dict[str, str], list[Any]]] = dc_field(default_factory=list)
    script: list[int] = dc_field(default_factory=list)
    answered: list[int] = dc_field(default_factory=list)
    refuse: str = "REFUSE"
    lock: threading.Lock = dc_field(default_factory=threading.Lock)

    @property
    def host(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def accepted(self) -> list[Any]:
        """Every change the endpoint took, repeats included, in arrival order."""
        with self.lock:
            return [e for _, batch in self.posts for e in batch]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    box: list[Receiver] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _answer(
            self, status: int, body: bytes = b"", headers: dict[str, str] | None = None
        ) -> None:
            self.send_response(status)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self._answer(200 if self.path == "/health" else 404, b"ok")

        def do_POST(self) -> None:  # noqa: N802
            r = box[0]
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            if self.path != "/changes":
                self._answer(404, b"no such endpoint")
                return
            with r.lock:
                status = r.script.pop(0) if r.script else 200
                batch = json.loads(body)
                if status == 200 and any(
                    (e["payload"]["after"] or {}).get("name") == r.refuse for e in batch
                ):
                    status = 400
                if status == 200:
                    r.posts.append(({k.lower(): v for k, v in self.headers.items()}, batch))
                r.answered.append(status)
            extra = {"retry-after": "1"} if status == 429 else {}
            self._answer(status, b"refused: a name nobody wants" if status == 400 else b"",
                         extra)  # fmt: skip

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    box.append(Receiver(server))
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield box[0]
    server.shutdown()
    server.server_close()


# --------------------------------------------------------------------------- declarations


def profile(raw: str, host: str, limit: int | None = 5, **http: Any) -> Any:
    endpoint = HTTP(name="api", host=host, healthz="/health", **http)

    @meta(owner=OWNER)
    @sink(endpoint.path("/changes", limit=limit, headers={"X-Team": "growth"}), cdc="debezium")
    @source(Kafka(name="profiles").topic(raw), disorder="14d", cdc="debezium")
    @dataset(index=True)
    class Profile:
        uid: int = field(key=True)
        name: str
        score: int
        ts: datetime

    return Profile


def test_fennel_rules_for_http_sinks_are_kept_at_declaration() -> None:
    api = HTTP(name="api", host="http://h", healthz="/health")
    for kwargs, says in (({"cdc": "upsert"}, "cdc='debezium'"), ({}, "cdc='debezium'"),
                         ({"cdc": "debezium", "every": "1h"}, "every="),
                         ({"cdc": "debezium", "how": "full"}, "incremental"),
                         ({"cdc": "debezium", "renames": {"a": "b"}}, "renames"),
                         ({"cdc": "debezium", "since": T0}, "since/until")):  # fmt: skip
        with pytest.raises(DeclarationError, match="an HTTP sink") as err:
            sink(api.path("/x"), **kwargs)
        assert says in str(err.value)
    with pytest.raises(DeclarationError, match="limit is the number of changes"):
        api.path("/x", limit=0)


def test_the_compiler_emits_an_outbox_a_change_job_and_a_delivery_job() -> None:
    bs = compile_blueprints(EntityGraph.build(commit_spec("h", [profile("raw", "http://h")])))
    jobs = jobs_of(bs)
    changes = next(j for j in jobs if isinstance(j, plan.KafkaSinkJobSpec))
    delivery = next(j for j in jobs if isinstance(j, plan.HttpSinkJobSpec))
    outbox = next(b for b in bs.of_kind("topic") if b.spec_dict()["role"] == "http-outbox")
    dataset_topic = next(b.name for b in bs.of_kind("topic") if b.spec_dict()["role"] == "dataset")
    errors = next(b.name for b in bs.of_kind("topic") if b.spec_dict()["role"] == "error")
    assert (changes.input_topic, changes.output_topic) == (dataset_topic, outbox.name)
    assert (delivery.input_topic, delivery.error_topic) == (outbox.name, errors)
    assert delivery.partitions == changes.partitions == outbox.spec_dict()["partitions"] == 4
    assert plan.read_topics(delivery) == (outbox.name,) and delivery.KIND == "http_sink"
    target = HttpEndpoint.of(delivery.sink.connector)
    assert (target.url, target.healthz_url, target.limit) == ("http://h/changes",
                                                              "http://h/health", 5)  # fmt: skip
    assert target.headers == (("X-Team", "growth"),)
    default = compile_blueprints(
        EntityGraph.build(commit_spec("d", [profile("raw", "http://h/", limit=None)]))
    )
    d = next(j for j in jobs_of(default) if isinstance(j, plan.HttpSinkJobSpec))
    assert HttpEndpoint.of(d.sink.connector).limit == 100  # Fennel's default
    assert HttpEndpoint.of(d.sink.connector).url == "http://h/changes"


def test_secrets_stay_out_of_the_ir_and_a_commit_that_needs_one_is_refused() -> None:
    secret = Secret("arn:aws:secretsmanager:r:1:secret:hooks")
    ds = profile("raw", secret["host"], ca_cert=Certificate(secret["ca"]))  # type: ignore[arg-type]
    spec = commit_spec("s", [ds])
    config = str(spec.datasets[0].sinks[0].connector.config)
    assert "hooks" not in config and "arn:" not in config  # not even the reference
    errors = validate(spec, None, PLATFORM_RULES)
    assert [(e.entity, e.where) for e in errors] == [("Profile", "sink http(api)")] * 2
    assert "host is a Secret" in errors[0].message and "no AWS secrets" in errors[0].message
    assert "ca_cert is a Secret" in errors[1].message
    not_a_url = validate(commit_spec("u", [profile("raw", "sink.internal:80")]), None,
                         PLATFORM_RULES)  # fmt: skip
    assert "is not an http:// or https:// URL" in not_a_url[0].message


def test_the_commit_checks_a_new_sinks_health_endpoint(receiver: Receiver) -> None:
    ok = commit_spec("ok", [profile("raw", receiver.host)])
    assert validate(ok, None, PLATFORM_RULES) == []
    down = f"http://127.0.0.1:{_free_port()}"
    errors = validate(commit_spec("down", [profile("raw", down)]), None, PLATFORM_RULES)
    assert [(e.entity, e.where) for e in errors] == [("Profile", "sink http(api)")]
    assert f"health check GET {down}/health failed: ConnectError" in errors[0].message
    assert "env=" in errors[0].fix
    missing = validate(commit_spec("m", [profile("raw", receiver.host + "/nope")]), None,
                       PLATFORM_RULES)  # fmt: skip
    assert "/nope/health answered 404" in missing[0].message
    # a sink committed before is not checked again: a later commit does not depend on it
    same = commit_spec("down", [profile("raw", down)])
    assert validate(same, same, PLATFORM_RULES) == []


def test_a_change_carries_its_outbox_position_and_backoff_honours_retry_after() -> None:
    value = json.dumps({"payload": {"op": "c", "after": {"uid": 1}, "source": {"dataset": "P"}}})
    event = with_position(value.encode(), 3, 41)
    assert event["payload"]["source"] == {"dataset": "P", "fennel": {"partition": 3, "offset": 41}}
    down = Refused(None, "ConnectError")
    assert [backoff_s(a, down) for a in (0, 1, 2, 10)] == [0.5, 1.0, 2.0, 30.0]
    assert backoff_s(0, Refused(429, "", retry_after_s=7)) == 7.0
    assert backoff_s(0, Refused(503, "", retry_after_s=3600)) == 60.0  # capped
    assert backoff_s(10, Refused(401, "")) == 60.0  # misconfigured: at most once a minute
    assert Refused(400, "").content and not Refused(400, "").outage
    assert Refused(503, "").outage and Refused(None, "x").outage and not Refused(401, "").outage


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --------------------------------------------------------------------------- services


def random_changes(
    rnd: random.Random, n: int, keys: int, live: set[int], start: int = 0, refuse_at: int = -1
) -> list[tuple[str, dict[str, Any]]]:
    """``n`` Debezium changes of ``keys`` keys a minute apart from ``start``: creates,
    updates and (a fifth of the time, for a live key) deletes; the change at minute
    ``refuse_at`` is an upsert named ``Receiver.refuse``. ``live`` tracks the live keys."""
    out: list[tuple[str, dict[str, Any]]] = []
    for minute in range(start, start + n):
        uid = rnd.randrange(keys)
        if minute != refuse_at and uid in live and rnd.random() < 0.2:
            out.append(("d", row(uid, "gone", 0, minute)))
            live.discard(uid)
        else:
            name = "REFUSE" if minute == refuse_at else f"n{minute}"
            out.append(("u" if uid in live else "c", row(uid, name, minute, minute)))
            live.add(uid)
    return out


def expected(changes: list[tuple[str, dict[str, Any]]]) -> dict[int, list[tuple[str, Any, Any]]]:
    """Each key's change events as (op, before, after), given its source changes in order."""
    live: dict[int, dict[str, Any]] = {}
    out: dict[int, list[tuple[str, Any, Any]]] = {}
    for op, r in changes:
        uid, prev = r["uid"], live.get(r["uid"])
        if op == "d":
            if prev is not None:
                out.setdefault(uid, []).append(("d", prev, None))
                live.pop(uid)
        else:
            out.setdefault(uid, []).append(("u" if prev else "c", prev, r))
            live[uid] = r
    return out


def delivered(events: list[Any]) -> dict[int, list[tuple[str, Any, Any]]]:
    """What the endpoint took, each outbox position once (the receiver's de-duplication),
    per key in outbox order."""
    seen: dict[tuple[int, int], Any] = {}
    for e in events:
        pos = e["payload"]["source"]["fennel"]
        key = (pos["partition"], pos["offset"])
        assert seen.setdefault(key, e) == e, f"two different changes at {key}"
    out: dict[int, list[tuple[str, Any, Any]]] = {}
    for _, e in sorted(seen.items()):
        p = e["payload"]
        uid = (p["after"] or p["before"])["uid"]
        out.setdefault(uid, []).append((p["op"], p["before"], p["after"]))
    return out


def count(per_key: dict[int, list[Any]]) -> int:
    return sum(len(v) for v in per_key.values())


def read_errors(s: Settings, topic: str) -> list[dict[str, Any]]:
    c = Consumer({"bootstrap.servers": s.kafka_servers, "group.id": f"e-{time.time_ns()}",
                  "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                  "enable.partition.eof": True})  # fmt: skip
    c.assign([TopicPartition(topic, 0, 0)])
    out: list[dict[str, Any]] = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            break
        out.append(decode_error(m.value() or b""))
    c.close()
    return out


class Deliverers:
    """The delivery job's partitions in threads of this process."""

    def __init__(self, s: Settings, job: JobRow) -> None:
        self.stop = threading.Event()
        self.failures: list[BaseException] = []
        self.workers = [HttpDelivery(s, job, p) for p in range(job.partitions)]
        self.threads = [threading.Thread(target=self._run, args=(w,), daemon=True)
                        for w in self.workers]  # fmt: skip
        for t in self.threads:
            t.start()

    def _run(self, w: HttpDelivery) -> None:
        try:
            w.run(self.stop, lambda: None)
        except BaseException as e:  # noqa: BLE001
            self.failures.append(e)

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(60)
        assert not self.failures, self.failures


@pytest.mark.services
def test_every_change_reaches_an_unwell_endpoint_in_order_and_a_refused_one_is_kept(
    engine_settings: Settings, receiver: Receiver
) -> None:
    s = engine_settings
    raw = f"{s.namespace}.raw"
    create_topic(s, raw, 4)
    jobs = commit(s, [profile(raw, receiver.host, limit=5)])
    src, changes_job = jobs["source:Profile"], jobs["kafka_sink:Profile"]
    delivery = jobs["http_sink:Profile"]
    assert isinstance(delivery.spec, plan.HttpSinkJobSpec)
    rnd = random.Random(11)
    changes = random_changes(rnd, 60, 8, set(), refuse_at=17)
    # the endpoint is down twice, rate-limits once and errs once before it takes anything
    receiver.script[:] = [503, 503, 429, 500]
    produce_changes(s, raw, changes)
    want = expected(changes)
    refused_uid = changes[17][1]["uid"]
    total = count(want)
    fleet = Fleet(s)
    fleet.start(src)
    fleet.start(changes_job)
    out = Deliverers(s, delivery)
    try:
        wait_for(lambda: count(delivered(receiver.accepted())) >= total - 1, 120,
                 "every change but the refused one")  # fmt: skip
        time.sleep(1)
    finally:
        out.close()
        fleet.stop()
    got = delivered(receiver.accepted())
    # the refused change is the one missing, and only from its key's events
    assert {k: v for k, v in got.items() if k != refused_uid} == {
        k: v for k, v in want.items() if k != refused_uid
    }
    mine = [e for e in want[refused_uid] if (e[2] or {}).get("name") != receiver.refuse]
    assert got[refused_uid] == mine
    assert receiver.answered[:4] == [503, 503, 429, 500] and 400 in receiver.answered
    assert sum(w.retries for w in out.workers) >= 4
    assert all(len(batch) <= 5 for _, batch in receiver.posts)  # limit=5 changes a request
    assert all(h.get("x-team") == "growth" and h["content-type"] == "application/json"
               for h, _ in receiver.posts)  # fmt: skip
    assert sum(w.refused for w in out.workers) == 1
    # the engine's metrics count them too (GET /metrics of the engine that runs the job)
    name = delivery.name

    def metric(family: str) -> float:
        return sum(REGISTRY.get_sample_value(family, {"job": name, "partition": str(p)}) or 0.0
                   for p in range(delivery.partitions))  # fmt: skip

    assert metric("fennel_engine_bad_rows_total") == 1
    assert metric("fennel_engine_outputs_total") == sum(w.delivered for w in out.workers)
    errors = read_errors(s, delivery.spec.error_topic)
    assert len(errors) == 1 and errors[0]["stage"] == "sink"
    assert "answered 400: refused: a name nobody wants" in errors[0]["reason"]
    assert json.loads(errors[0]["payload"])["payload"]["after"]["name"] == receiver.refuse
    assert errors[0]["where"] == "sink http(api)"


@pytest.mark.services
def test_sigkilled_runners_and_deliverers_leave_every_change_delivered(
    engine_settings: Settings, receiver: Receiver
) -> None:
    s = engine_settings
    raw = f"{s.namespace}.raw"
    create_topic(s, raw, 4)
    commit(s, [profile(raw, receiver.host, limit=7)])
    rnd = random.Random(7)
    changes: list[tuple[str, dict[str, Any]]] = []
    live: set[int] = set()
    os.environ["FENNEL_ENGINE_CRASH"] = "mid_batch:0.05,after_commit:0.05"
    sup = Supervisor(s, engine_id="http-crashy")
    t = threading.Thread(target=sup.serve, daemon=True)
    t.start()
    kills = 0
    try:
        for w in range(3):
            wave = random_changes(rnd, 60, 10, live, start=1 + 60 * w)
            changes += wave
            produce_changes(s, raw, wave)
            kills += kill_at_random(sup, 3.5, rnd)
        os.environ.pop("FENNEL_ENGINE_CRASH")
        kill_all(sup)  # restart every runner without crash points
        want = expected(changes)
        total = count(want)
        wait_for(lambda: count(delivered(receiver.accepted())) >= total,
                 240, "every change delivered")  # fmt: skip
        time.sleep(2)
    finally:
        os.environ.pop("FENNEL_ENGINE_CRASH", None)
        sup.stop()
        t.join(120)
    assert kills >= 10, f"only {kills} kills"
    assert delivered(receiver.accepted()) == want  # repeats dropped by outbox position


@pytest.mark.services
def test_the_real_commit_refuses_an_http_sink_whose_endpoint_is_down(
    engine_settings: Settings,
) -> None:
    s = engine_settings
    down = f"http://127.0.0.1:{_free_port()}"
    with LocalClient(s) as c, pytest.raises(CommitRejected) as err:
        c.commit("down", datasets=[profile(f"{s.namespace}.raw", down)])
    assert "sink http(api)" in str(err.value) and "health check" in str(err.value)
