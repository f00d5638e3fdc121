"""No single event may stop or skew a dataset — each poison case on the running engine.

One Kafka-sourced dataset (``disorder="1h"``) feeds a keyed Count + Sum aggregate; one fleet
of runners (source and pipeline, every partition) stays up for the whole module. Each test
sends good rows, one hostile event, and good rows after it to the same source partition
(and good rows to the partition beside it), then proves: no runner failed or restarted, the
hostile event is in the error topic with its stage and a reason naming dataset and field,
and every good row is counted exactly as the MockClient counts it.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from fennel_dagster import dataset, inputs, meta, pipeline, source
from fennel_dagster import field as ds_field
from fennel_dagster.aggregate import Count, Sum
from fennel_dagster.engine.error_records import decode_error
from fennel_dagster.metadata.registry import JobRow
from fennel_dagster.mock import MockClient
from fennel_dagster.ops.limits import ERROR_RECORD_MAX_BYTES, MAX_TEXT_CHARS
from fennel_dagster.ops.rows import to_records
from fennel_dagster.ops.schema import BadRow
from fennel_dagster.settings import Settings
from fennel_dagster.sources import Kafka
from fennel_dagster.window import Continuous
from tests.engine.expected import as_multiset
from tests.engine.harness import Fleet, commit, raw_records, read_topic, wait_for
from tests.engine.repo import T0
from tests.platform import drop_platform

pytestmark = pytest.mark.services
COLS = ["uid", "total", "units", "n", "ts"]


def poison_graph(topic: str) -> list[Any]:
    @meta(owner="poison@example.com")
    @source(Kafka(name="events").topic(topic), disorder="1h", cdc="append")
    @dataset
    class Txn:
        uid: int
        amount: float
        qty: int
        note: str | None
        ts: datetime

    @meta(owner="poison@example.com")
    @dataset(index=True)
    class Spend:
        uid: int = ds_field(key=True)
        total: float
        units: int
        n: int
        ts: datetime

        @pipeline
        @inputs(Txn)
        def agg(cls, txn):
            return txn.groupby("uid").aggregate(
                total=Sum(of="amount", window=Continuous("forever")),
                units=Sum(of="qty", window=Continuous("forever")),
                n=Count(window=Continuous("forever")),
            )

    return [Txn, Spend]


@dataclass
class Engine:
    settings: Settings
    raw: str
    source: JobRow
    pipe: JobRow
    fleet: Fleet
    datasets: list[Any]
    slots: Iterator[int] = field(default_factory=itertools.count)


@pytest.fixture(scope="module")
def engine(live_stack: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    name = f"p{uuid.uuid4().hex[:10]}"
    s = live_stack.with_(
        pg_schema=name, namespace=name, state_dir=Path(tmp_path_factory.mktemp("poison")),
        partitions=1,  # one pipeline partition: each key's rows in arrival order, as the mock
        engine_snapshot_interval_s=5.0, engine_txn_interval_ms=50,
    )  # fmt: skip
    raw = f"{name}.raw"
    admin = AdminClient({"bootstrap.servers": s.kafka_servers})  # takes a 1.5 MB message
    for f in admin.create_topics(
        [NewTopic(raw, 2, 1, config={"max.message.bytes": "5000000"})]
    ).values():
        f.result(30)
    datasets = poison_graph(raw)
    jobs = commit(s, datasets)
    fleet = Fleet(s, owner="poison")
    fleet.start(jobs["source:Txn"])
    fleet.start(jobs["pipeline:Spend"])
    yield Engine(s, raw, jobs["source:Txn"], jobs["pipeline:Spend"], fleet, datasets)
    fleet.stop()
    drop_platform(s)


@dataclass
class Case:
    """One test's rows: keys and an hour of event time of its own."""

    engine: Engine
    slot: int
    uids: list[int]
    goods: list[dict[str, Any]] = field(default_factory=list)

    def good(self, n: int, beside: bool = False) -> list[bytes]:
        """Good rows in time order; ``beside``: for the other partition, keys of their own."""
        out = []
        uids = [u + 100 for u in self.uids] if beside else self.uids
        for _ in range(n):
            i = len(self.goods)
            row = {"uid": uids[i % len(uids)], "amount": float(i % 7), "qty": 1,
                   "note": None, "ts": self.at(i).isoformat()}  # fmt: skip
            self.goods.append(row)
            out.append(json.dumps(row).encode())
        return out

    def at(self, i: int) -> datetime:
        return T0 + timedelta(days=self.slot, seconds=10 * i)


def case(engine: Engine) -> Case:
    slot = next(engine.slots)
    return Case(engine, slot, [10_000 * (slot + 1) + k for k in range(3)])


def uids_of(c: Case) -> list[int]:
    return c.uids + [u + 100 for u in c.uids]


def send(e: Engine, messages: list[tuple[int, bytes | None]]) -> list[int]:
    """Produce (partition, value) in order; the offsets they got."""
    p = Producer({"bootstrap.servers": e.settings.kafka_servers, "enable.idempotence": True,
                  "message.max.bytes": 5_000_000})  # fmt: skip
    offsets: list[int] = [0] * len(messages)
    for i, (part, value) in enumerate(messages):

        def done(err: Any, msg: Any, i: int = i) -> None:
            assert err is None, err
            offsets[i] = msg.offset()

        p.produce(e.raw, value, partition=part, on_delivery=done)
    assert p.flush(30) == 0
    return offsets


def errors_of(e: Engine, job: JobRow) -> list[dict[str, Any]]:
    """The job's error records, decoded, each with its size on the topic as ``_bytes``."""
    return [
        {**decode_error(v), "_bytes": len(v)} for v in raw_records(e.settings, job.spec.error_topic)
    ]


def expected(e: Engine, rows: list[dict[str, Any]]) -> tuple[list[tuple[Any, ...]], list[BadRow]]:
    """Spend's rows as the MockClient computes them from ``rows``, and what it rejected."""
    mock = MockClient(strict=False)  # error rows returned, as the engine's error topic has them
    mock.commit("reference", datasets=e.datasets)
    df = pd.DataFrame(rows)
    df["ts"] = pd.to_datetime(df["ts"], utc=True)
    result = mock.log(e.datasets[0], df)
    return as_multiset(to_records(mock.get_dataset_df("Spend")), COLS), result.rejected


def outputs(e: Engine, uids: list[int]) -> list[tuple[Any, ...]]:
    rows = [r for _, _, r in read_topic(e.settings, e.pipe.spec.output_topic, 1, timeout=5)]
    return as_multiset([r for r in rows if r["uid"] in uids], COLS)


def run_case(
    e: Engine,
    c: Case,
    poison: list[bytes | None],
    stage: str,
    says: list[str],
    job: JobRow | None = None,
    before: int = 30,
    after: int = 30,
) -> list[dict[str, Any]]:
    """Good rows, the poison, good rows after it (partition 0), and good rows beside it
    (partition 1); returns the poison's error records once every good row is counted."""
    msgs: list[tuple[int, bytes | None]] = [(0, v) for v in c.good(before)]
    first_poison = len(msgs)
    msgs += [(0, v) for v in poison]
    msgs += [(0, v) for v in c.good(after)] + [(1, v) for v in c.good(10, beside=True)]
    offsets = send(e, msgs)
    poison_at = set(offsets[first_poison : first_poison + len(poison)])
    want, _ = expected(e, c.goods)
    job = job or e.source
    found: list[dict[str, Any]] = []

    def done() -> bool:
        found[:] = [x for x in errors_of(e, job) if x["stage"] == stage
                    and (job is not e.source or (x["source"]["topic"] == e.raw
                                                 and x["source"]["offset"] in poison_at))]  # fmt: skip
        return len(outputs(e, uids_of(c))) >= len(want) and len(found) >= len(poison)

    wait_for(lambda: done() or bool(e.fleet.failures), 120, "good rows counted, poison reported")
    assert not e.fleet.failures, e.fleet.failures  # no runner stopped (or would restart)
    assert all(t.is_alive() for t, _, _ in e.fleet.threads)
    assert outputs(e, uids_of(c)) == want  # every good row, counted as the mock counts it
    for x in found:
        for word in says:
            assert word in x["reason"], (word, x["reason"])
        assert x["_bytes"] <= ERROR_RECORD_MAX_BYTES
    return found


def row(c: Case, **over: Any) -> bytes:
    base = {"uid": c.uids[0], "amount": 1.0, "qty": 1, "note": None,
            "ts": c.at(len(c.goods)).isoformat()}  # fmt: skip
    return json.dumps({**base, **over}, ensure_ascii=False).encode()


# --------------------------------------------------------------------------- event time


def test_an_event_stamped_in_year_9999_is_an_error_row_and_the_partition_goes_on(
    engine: Engine,
) -> None:
    c = case(engine)
    run_case(engine, c, [row(c, ts="9999-12-31T00:00:00+00:00")], "schema",
             ["Txn.ts", "outside the range"])  # fmt: skip


def test_an_event_stamped_in_year_1_is_an_error_row(engine: Engine) -> None:
    c = case(engine)
    run_case(engine, c, [row(c, ts="0001-01-01T00:00:00+00:00")], "schema",
             ["Txn.ts", "outside the range"])  # fmt: skip


def test_an_event_stamped_in_2200_does_not_move_the_watermark(engine: Engine) -> None:
    """Rejected as too far ahead of its arrival; every good row after it is on time."""
    c = case(engine)
    (err,) = run_case(engine, c, [row(c, ts="2200-01-01T00:00:00+00:00")], "event-time",
                      ["Txn.ts", "2200-01-01", "max_future"])  # fmt: skip
    assert err["row"]["ts"].startswith("2200-01-01")
    late = [x for x in errors_of(engine, engine.source) if x["stage"] == "late"
            and x["row"] and x["row"]["uid"] in c.uids]  # fmt: skip
    assert not late, late[0]["reason"]


def test_an_event_before_the_sources_earliest_is_an_error_row(engine: Engine) -> None:
    c = case(engine)
    run_case(engine, c, [row(c, ts="1969-07-20T20:17:00+00:00")], "event-time",
             ["Txn.ts", "earliest"])  # fmt: skip


# --------------------------------------------------------------------------- values


def test_a_key_of_2_to_the_70_is_an_error_row(engine: Engine) -> None:
    c = case(engine)
    run_case(engine, c, [row(c, uid=2**70)], "schema", ["Txn.uid", "beyond int64"])


def test_a_float_in_an_int_field_is_an_error_row(engine: Engine) -> None:
    c = case(engine)
    run_case(engine, c, [row(c, qty=1e20), row(c, qty=2.5)], "schema", ["Txn.qty"])


def test_nan_and_infinity_in_a_float_field_are_error_rows(engine: Engine) -> None:
    c = case(engine)
    bad = [row(c).replace(b'"amount": 1.0', b'"amount": NaN'),
           row(c).replace(b'"amount": 1.0', b'"amount": -Infinity')]  # fmt: skip
    run_case(engine, c, bad, "schema", ["Txn.amount", "not a finite number"])  # type: ignore[arg-type]


def test_a_sum_that_overflows_int64_is_an_error_row_with_its_reason(engine: Engine) -> None:
    """Two qty of 2^62 on one key: the Sum leaves int64. The aggregate's outputs for that
    key are error rows naming the field (as the mock rejects them); the rest go on."""
    e, c = engine, case(engine)
    msgs = [(0, v) for v in c.good(30)]
    for _ in range(2):
        big = {"uid": c.uids[0], "amount": 1.0, "qty": 2**62, "note": None,
               "ts": c.at(len(c.goods)).isoformat()}  # fmt: skip
        c.goods.append(big)
        msgs.append((0, json.dumps(big).encode()))
    msgs += [(0, v) for v in c.good(20)]
    send(e, msgs)
    want, rejected = expected(e, c.goods)
    assert any("Spend.units" in b.reason for b in rejected), "the mock rejects it too"
    overflow = lambda: [x for x in errors_of(e, e.pipe) if "Spend.units" in x["reason"]]  # noqa: E731
    wait_for(lambda: outputs(e, uids_of(c)) == want and bool(overflow()) or bool(e.fleet.failures),
             90, "the outputs the mock makes and the overflow's error rows")  # fmt: skip
    assert not e.fleet.failures, e.fleet.failures
    err = overflow()[0]
    assert err["stage"] == "output-schema" and "beyond int64" in err["reason"]
    assert "Spend.agg" in err["reason"]


# --------------------------------------------------------------------------- payloads


def test_a_900kb_payload_that_is_not_json_fits_the_error_topic(engine: Engine) -> None:
    c = case(engine)
    blob = b"<html>" + b"y" * 900_000
    (err,) = run_case(engine, c, [blob], "parse", ["not JSON"])
    assert err["payload_truncated"] and err["payload_bytes"] == len(blob)
    assert err["payload_sha256"] == hashlib.sha256(blob).hexdigest()
    assert blob.startswith(err["payload"]) and len(err["payload"]) > 500_000


def test_an_800kb_row_with_a_long_non_ascii_string_is_an_error_row(engine: Engine) -> None:
    c = case(engine)
    (err,) = run_case(engine, c, [row(c, note="ü€" * 160_000)], "schema",
                      ["Txn.note", "characters long"])  # fmt: skip
    assert err["payload_truncated"] and err["payload_bytes"] > 800_000


def test_a_1_5mb_message_is_an_error_row(engine: Engine) -> None:
    c = case(engine)
    (err,) = run_case(engine, c, [row(c, note="z" * 1_500_000)], "parse", ["larger than"])
    assert err["payload_bytes"] > 1_500_000


def test_a_null_value_message_on_an_append_source_is_an_error_row(engine: Engine) -> None:
    c = case(engine)
    run_case(engine, c, [None], "parse", ["null value", "Txn"])


def test_json_nested_ten_thousand_deep_is_an_error_row(engine: Engine) -> None:
    c = case(engine)
    run_case(engine, c, [b"[" * 10_000 + b"]" * 10_000], "parse", ["nested"])


def test_a_poison_row_inside_the_dataset_topic_is_set_aside_by_the_pipeline(
    engine: Engine,
) -> None:
    """A row the source never checked (written straight into Txn's topic, e.g. by an older
    engine) that the aggregate cannot hold: the runner bisects its batch, sends that
    message to the error topic (stage ``process``) and commits the rest."""
    e, c = engine, case(engine)
    good = [json.loads(v) for v in c.good(40)]
    topic = e.pipe.spec.inputs[0].topic
    bad = json.dumps({**good[0], "uid": 2**70}).encode()
    p = Producer({"bootstrap.servers": e.settings.kafka_servers})
    for i, r in enumerate(good):
        p.produce(topic, json.dumps(r).encode(), partition=0)
        if i == 20:
            p.produce(topic, bad, partition=0)
    assert p.flush(30) == 0
    want, _ = expected(e, good)
    wait_for(lambda: outputs(e, uids_of(c)) == want or bool(e.fleet.failures), 90, "good rows")
    assert not e.fleet.failures, e.fleet.failures
    found = [x for x in errors_of(e, e.pipe) if x["stage"] == "process" and x["payload"] == bad]
    assert len(found) == 1 and "OverflowError" in found[0]["reason"]


# --------------------------------------------------------------------------- fuzz

INT64 = 2**63
EXTREME_FIELDS = {
    "ts": ["0001-01-01T00:00:00+00:00", "9999-12-31T23:59:59+00:00", "1677-09-21T00:00:00+00:00",
           "2262-04-12T00:00:00+00:00", "2200-01-01T00:00:00+00:00", "1900-01-01T00:00:00+00:00",
           -1e20, 1e20, 1e300, "", "2026-13-45T00:00:00", "NaT", None, True, [1]],
    "uid": [INT64, -INT64 - 1, 2**70, 1e19, 1.5, "1", True, None, [1], {"a": 1}],
    "amount": ["NaN", "Infinity", "-Infinity", "1e309", '"1.0"', None, True],
    "qty": [INT64, 1e20, 2.5, "x", -INT64 - 1],
    "note": ["n" * 300_000, 123, []],
}  # fmt: skip
RAW_PAYLOADS = [
    b"[" * 2000 + b"]" * 2000,  # deeper than the parser's recursion limit
    b"{}", b"42", b'"text"', b"[1, 2]", b"", b"\xff\xfe\x00{", b"null",
    b"<" + b"q" * 1_200_000,  # not JSON, and bigger than a row may be
]  # fmt: skip


@st.composite
def bad_payload(draw: st.DrawFn, good: dict[str, Any]) -> bytes | None:
    kind = draw(st.sampled_from(["field", "raw", "utf16", "dup", "null"]))
    if kind == "raw":
        return draw(st.sampled_from(RAW_PAYLOADS))
    if kind == "utf16":
        return json.dumps(good).encode("utf-16")
    if kind == "null":
        return None
    name = draw(st.sampled_from(sorted(EXTREME_FIELDS)))
    value = draw(st.sampled_from(EXTREME_FIELDS[name]))
    if name == "amount" and isinstance(value, str):  # JSON tokens Python's json accepts
        text = json.dumps({**good, "amount": 0.0}).replace('"amount": 0.0', f'"amount": {value}')
        return text.encode()
    if kind == "dup":  # the same name twice: the last one counts, as JSON parsers do
        body = json.dumps(good)[1:-1]
        return ("{" + body + f", {json.dumps(name)}: {json.dumps(value)}" + "}").encode()
    return json.dumps({**good, name: value}).encode()


# one example against live services; shrinking would replay it for many minutes
@settings(
    max_examples=1,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    phases=(Phase.explicit, Phase.generate),
)
@given(data=st.data())
def test_fuzzed_extreme_values_across_partitions_are_error_rows_and_good_rows_all_count(
    engine: Engine, data: st.DataObject
) -> None:
    """Extreme and boundary values for every dtype, hostile payloads, and good rows (some at
    the boundaries: int64's limits, the largest float, the longest text) on both source
    partitions: no runner stops, every bad payload is an error row naming the dataset,
    every good row is counted as the MockClient counts it."""
    e, c = engine, case(engine)
    keys = [10_000 * (c.slot + 1) + k for k in range(6)]
    c.uids = keys  # uids_of(c) covers them: each key keeps to one partition, in order
    n = data.draw(st.integers(80, 140), label="good rows")
    msgs: list[tuple[int, bytes | None]] = []
    bad_at: list[int] = []
    for i in range(n):
        uid = keys[data.draw(st.integers(0, 2), label="key")]
        good = {"uid": uid, "amount": float(i % 13), "qty": i % 5, "note": None,
                "ts": c.at(i).isoformat()}  # fmt: skip
        if data.draw(st.integers(0, 3), label="bad here") == 0:
            bad_at.append(len(msgs))
            msgs.append((data.draw(st.integers(0, 1)), data.draw(bad_payload(good))))
        c.goods.append(good)
        msgs.append((uid % 2, json.dumps(good).encode()))
    edges = [  # boundary values that are good: each on a key of its own
        {"uid": INT64 - 1, "amount": 1.7e308, "qty": INT64 - 1, "note": "e" * MAX_TEXT_CHARS},
        {"uid": -INT64, "amount": -1.7e308, "qty": -INT64, "note": ""},
    ]  # fmt: skip
    for j, edge in enumerate(edges):
        row = {**edge, "ts": c.at(n + j).isoformat()}
        c.goods.append(row)
        msgs.append((j, json.dumps(row, ensure_ascii=False).encode()))
    c.uids = keys + [INT64 - 1, -INT64]
    offsets = send(e, msgs)
    bad = {(msgs[i][0], offsets[i]) for i in bad_at}
    want, _ = expected(e, c.goods)
    outs: list[tuple[Any, ...]] = []

    def reported() -> set[tuple[int, int]]:
        return {(x["source"]["partition"], x["source"]["offset"]) for x in errors_of(e, e.source)
                if x["source"]["topic"] == e.raw}  # fmt: skip

    def settled() -> bool:
        outs[:] = [o for o in outputs(e, c.uids)]
        return (len(outs) >= len(want) and bad <= reported()) or bool(e.fleet.failures)

    try:
        wait_for(settled, 120, "every good row counted and every bad one reported")
    except AssertionError:
        missing = sorted(bad - reported())
        raise AssertionError(
            f"{len(outs)} of {len(want)} outputs; unreported bad payloads: "
            f"{[(msgs[i][1] or b'')[:100] for i in bad_at if (msgs[i][0], offsets[i]) in missing]}"
            f"; outputs missing: {sorted(set(want) - set(outs))[:5]}"
            f"; outputs unexpected: {sorted(set(outs) - set(want))[:5]}"
        ) from None
    assert not e.fleet.failures, e.fleet.failures
    assert outs == want
    good_at = {(p, o) for (p, _), o in zip(msgs, offsets, strict=True)} - bad
    assert not good_at & reported(), "a good row went to the error topic"
    for x in errors_of(e, e.source):
        if (x["source"]["partition"], x["source"]["offset"]) in bad:
            assert x["dataset"] == "Txn" and x["stage"] in {"parse", "schema", "event-time"}
            assert "Txn" in x["reason"] + x["where"] and x["_bytes"] <= ERROR_RECORD_MAX_BYTES
