"""Fuzzed and malformed input through a real source runner: no crash, nothing lost.

Hypothesis makes payloads (wrong types, missing fields, garbage bytes, huge values, late
events, good rows) for a Kafka source; one runner ingests them over the real broker. Every
good row reaches the dataset topic exactly once; every bad one is in the error topic with
its stage, a reason naming the dataset, its source offset and its raw payload.
"""

from __future__ import annotations

import hashlib
import json
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from confluent_kafka import Producer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fennel_dagster.engine.error_records import decode_error
from fennel_dagster.engine.runner import Runner
from fennel_dagster.settings import Settings
from tests.engine import repo
from tests.engine.harness import commit, create_topic, raw_records, read_topic, wait_for

pytestmark = pytest.mark.services
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def good_row(i: int) -> dict[str, Any]:
    return {"uid": i % 7, "amount": float(i), "ts": (T0 + timedelta(minutes=i)).isoformat()}


bad_payloads = st.one_of(
    st.binary(min_size=1, max_size=64).filter(lambda b: not b.strip().startswith((b"{", b"["))),
    st.just(b"\xff\xfe not utf-8 \xc3\x28"),
    st.builds(
        lambda v: json.dumps({"uid": v, "amount": 1.0, "ts": T0.isoformat()}).encode(),
        st.one_of(
            st.text(max_size=5),
            st.floats(allow_nan=False).filter(lambda f: not f.is_integer()),
            st.lists(st.integers(), max_size=2),
        ),
    ),  # fmt: skip
    st.builds(lambda: json.dumps({"uid": 1, "ts": T0.isoformat()}).encode()),  # missing amount
    st.builds(
        lambda s: json.dumps({"uid": 1, "amount": 2.0, "ts": s}).encode(), st.text(max_size=8)
    ),
    st.builds(
        lambda n: json.dumps({"uid": 1, "amount": "x" * n, "ts": T0.isoformat()}).encode(),
        st.integers(1, 5000),
    ),  # fmt: skip
    st.just(b"[1, 2, 3]"),
    st.just(b"x" * 1_040_000),  # bigger than any row may be
    st.just(
        json.dumps({"uid": 3, "amount": 1.0, "ts": (T0 - timedelta(days=3)).isoformat()}).encode()
    ),  # late
)


@settings(max_examples=1, deadline=None, suppress_health_check=list(HealthCheck))
@given(bad=st.lists(bad_payloads, min_size=30, max_size=60), goods=st.integers(50, 120))
def test_bad_rows_go_to_the_error_topic_and_good_rows_are_processed(
    engine_settings: Settings, bad: list[bytes], goods: int
) -> None:
    s = engine_settings.with_(partitions=1)
    topic = f"{s.namespace}.raw"
    create_topic(s, topic, 1)
    jobs = commit(s, repo.graph(topic))
    src = jobs["source:Txn"]
    p = Producer({"bootstrap.servers": s.kafka_servers, "message.max.bytes": 5_000_000})
    # interleave: good rows in time order, bad payloads between them; one late row needs the
    # watermark to be ahead, so the good rows come first in each chunk
    good = [json.dumps(good_row(i)).encode() for i in range(goods)]
    payloads = []
    for i, b in enumerate(bad):
        payloads += good[i * goods // len(bad) : (i + 1) * goods // len(bad)] + [b]
    for v in payloads:
        p.produce(topic, v, partition=0)
    assert p.flush(30) == 0
    stop = threading.Event()
    runner = Runner(s, src, 0, "fuzz")
    failures: list[BaseException] = []

    def run() -> None:
        try:
            runner.run(stop)
        except BaseException as e:  # noqa: BLE001
            failures.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    out_topic, err_topic = src.spec.output_topic, src.spec.error_topic
    try:
        wait_for(lambda: runner.stats.messages >= len(payloads) or bool(failures), 120, "ingest")
    finally:
        stop.set()
        t.join(60)
    assert not failures, failures
    rows = [r for _, _, r in read_topic(s, out_topic, 1)]
    errors = [decode_error(v) for v in raw_records(s, err_topic)]
    # a record too big for the error topic keeps the payload's head, size and SHA-256
    in_errors = {e["payload"] for e in errors if not e.get("payload_truncated")}
    in_errors |= {v for v in payloads for e in errors if e.get("payload_truncated")
                  and e["payload_sha256"] == hashlib.sha256(v).hexdigest()}  # fmt: skip
    # every good row exactly once
    canon = sorted(json.dumps(r, sort_keys=True) for r in rows)
    for i in range(goods):
        assert canon.count(json.dumps(_canon(good_row(i)), sort_keys=True)) == 1, good_row(i)
    # every payload is either one output row or in the error topic with its raw bytes
    assert not in_errors & set(good)
    assert len(rows) == len(payloads) - sum(1 for v in payloads if v in in_errors)
    for v in bad:
        if not json_row_is_good(v) and not _lenient_ts(v):
            assert v in in_errors, f"bad payload {v[:60]!r} missing from the error topic"
    for e in errors:
        assert e["dataset"] == "Txn" and "Txn" in e["reason"] + e["where"]
        assert e["stage"] in {"parse", "schema", "late"} and e["reason"]
        assert e["source"]["topic"] == topic and e["source"]["offset"] >= 0


def _lenient_ts(v: bytes) -> bool:
    """A payload whose only flaw is a ts that pandas (leniently) parses: may be accepted."""
    try:
        d = json.loads(v)
        return isinstance(d, dict) and isinstance(d.get("ts"), str) and d.get("amount") == 2.0
    except ValueError:
        return False


def _canon(r: dict[str, Any]) -> dict[str, Any]:
    return {**r, "ts": datetime.fromisoformat(r["ts"]).isoformat()}


def json_row_is_good(v: bytes) -> bool:
    """Whether a generated 'bad' payload happens to be a valid, on-time row."""
    try:
        d = json.loads(v)
    except ValueError:
        return False
    if not isinstance(d, dict) or set(d) != {"uid", "amount", "ts"}:
        return False
    ok_uid = isinstance(d["uid"], int) and not isinstance(d["uid"], bool)
    ok_amount = isinstance(d["amount"], int | float) and not isinstance(d["amount"], bool)
    try:
        ts = datetime.fromisoformat(d["ts"]) if isinstance(d["ts"], str) else None
    except ValueError:
        ts = None
    return ok_uid and ok_amount and ts is not None and ts >= T0
