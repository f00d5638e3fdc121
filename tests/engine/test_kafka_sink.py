"""Kafka sinks: a dataset's changes as Debezium JSON change events, exactly once.

The unit tests drive the sink job's logic on rows as a dataset topic carries them (upserts,
``index.DELETED`` deletes, out-of-order versions). The services tests commit through the
real client, run the source and sink jobs' runners over the real broker, and read the sink
topic with a ``read_committed`` consumer: every change once, in order per key, across a
restart and across SIGKILLed runners; sinks the platform cannot write exactly once are
refused at commit.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from fennel_dagster import dataset, field, meta, source
from fennel_dagster.client import LocalClient
from fennel_dagster.commit.compiler import compile_blueprints, jobs_of
from fennel_dagster.commit.environment import select_env
from fennel_dagster.commit.errors import CommitRejected
from fennel_dagster.commit.graph import EntityGraph
from fennel_dagster.declare import commit_spec
from fennel_dagster.engine.jobs.sink import KafkaSinkJob
from fennel_dagster.engine.messages import InMessage
from fennel_dagster.engine.supervisor import Supervisor
from fennel_dagster.mock import MockClient
from fennel_dagster.ops.index import DELETED
from fennel_dagster.ops.rows import dumps
from fennel_dagster.ops.state import MemoryState
from fennel_dagster.settings import Settings, get_settings
from fennel_dagster.sources import Kafka, Snowflake, sink
from fennel_dagster.wire import plan
from tests.engine.chaos import kill_all, kill_at_random
from tests.engine.harness import Fleet, commit, create_topic, wait_for

T0 = datetime(2026, 1, 1, tzinfo=UTC)
OWNER = "sinks@example.com"


def profile(raw: str, sink_topic: str, servers: str | None, offline: bool = False) -> Any:
    """A keyed dataset fed by Debezium events on ``raw``, sinking its changes to Kafka."""
    out = Kafka(name="changes", bootstrap_servers=servers or "")

    @meta(owner=OWNER)
    @sink(out.topic(sink_topic, format="json"), cdc="debezium")
    @source(Kafka(name="profiles").topic(raw), disorder="14d", cdc="debezium")
    @dataset(index=True, offline=offline)
    class Profile:
        uid: int = field(key=True)
        name: str
        score: int
        ts: datetime

    return Profile


def row(uid: int, name: str, score: int, minutes: int) -> dict[str, Any]:
    return {"uid": uid, "name": name, "score": score,
            "ts": (T0 + timedelta(minutes=minutes)).isoformat()}  # fmt: skip


def ms(r: dict[str, Any]) -> int:
    return int(datetime.fromisoformat(r["ts"]).timestamp() * 1000)


SOURCE = {"dataset": "Profile", "version": 1}


def event(
    op: str, before: dict[str, Any] | None, after: dict[str, Any] | None, at: int | None = None
) -> dict[str, Any]:
    """The expected change event (``at``: its time in ms; default: the new row's)."""
    at = at if at is not None else ms(after)  # type: ignore[arg-type]
    return {"payload": {"before": before, "after": after, "op": op, "ts_ms": at,
                        "source": SOURCE}}  # fmt: skip


def sink_job(datasets: list[Any]) -> plan.KafkaSinkJobSpec:
    bs = compile_blueprints(EntityGraph.build(commit_spec("sinks", datasets)))
    found = [j for j in jobs_of(bs) if isinstance(j, plan.KafkaSinkJobSpec)]
    assert len(found) == 1, found
    return found[0]


# --------------------------------------------------------------------------- unit


def test_the_compiler_emits_one_sink_job_reading_the_dataset_topic() -> None:
    bs = compile_blueprints(EntityGraph.build(commit_spec("s", [profile("raw", "changes", None)])))
    job = next(j for j in jobs_of(bs) if isinstance(j, plan.KafkaSinkJobSpec))
    topic = next(b.name for b in bs.of_kind("topic") if b.spec_dict()["role"] == "dataset")
    assert (job.input_topic, job.output_topic, job.partitions) == (topic, "changes", 4)
    assert job.dataset.name == "Profile" and job.sink.cdc == "debezium"
    assert job.KIND == "kafka_sink" and plan.read_topics(job) == (topic,)
    # the sink is no part of the dataset's physical identity: its topic is the same without
    other = compile_blueprints(EntityGraph.build(commit_spec("o", [profile("raw", "x", None)])))
    assert topic in {b.name for b in other.of_kind("topic")}
    assert job.name not in {j.name for j in jobs_of(other)}  # another sink, another job


def test_env_selection_drops_a_sink_and_its_job() -> None:
    @meta(owner=OWNER)
    @sink(Kafka(name="out").topic("t", format="json"), cdc="debezium", env=["prod"])
    @source(Kafka(name="in").topic("raw"), disorder="1d", cdc="upsert")
    @dataset(index=True)
    class P:
        uid: int = field(key=True)
        ts: datetime

    for env, sinks in (("prod", 1), ("dev", 0)):
        commit = select_env(commit_spec("e", [P], env=env))
        bs = compile_blueprints(EntityGraph.build(commit))
        assert len([j for j in jobs_of(bs) if isinstance(j, plan.KafkaSinkJobSpec)]) == sinks


def _msgs(rows: list[dict[str, Any]], start: int = 0) -> list[InMessage]:
    return [InMessage("ds", 0, start + i, None, dumps(r)) for i, r in enumerate(rows)]


def _run(job: KafkaSinkJob, state: MemoryState, rows: list[dict[str, Any]]) -> list[Any]:
    it = job.process(_msgs(rows), state)
    assert not it.errors, it.errors
    state.apply(it.writes)
    return [(o.key, json.loads(o.value)) for o in it.outputs]


def test_row_changes_map_to_debezium_envelopes() -> None:
    job = KafkaSinkJob(sink_job([profile("raw", "changes", None)]), sink_partitions=3)
    assert job.stateful and job.input_partitions(2) == [(job.topic, 2)]
    state = MemoryState()
    a1, b1 = row(1, "ann", 1, 0), row(2, "bob", 1, 0)
    a2, stale = row(1, "ann", 2, 10), row(1, "old", 0, 5)
    b_del = {**row(2, "bob", 1, 20), DELETED: True}
    ghost = {**row(3, "gus", 0, 20), DELETED: True}
    got = _run(job, state, [a1, b1, a2, stale, b_del, ghost, a2])
    k1, k2 = b'{"uid":1}', b'{"uid":2}'
    assert got == [
        (k1, event("c", None, a1)),
        (k2, event("c", None, b1)),
        (k1, event("u", a1, a2)),  # the older row and the repeat of a2 change nothing
        (k2, event("d", b1, None, at=ms(b_del))),
    ]  # and deleting a key that has no row writes nothing
    # the state carries each key's current row into the next batch
    a3, b2 = row(1, "ann", 3, 30), row(2, "bea", 5, 30)
    assert _run(job, state, [a3, b2]) == [(k1, event("u", a2, a3)), (k2, event("c", None, b2))]
    # one key's events go to one partition of the sink topic
    it = job.process(_msgs([row(1, "x", 9, 40), row(1, "y", 9, 50)]), state)
    assert len({o.partition for o in it.outputs}) == 1 and it.outputs[0].partition < 3
    assert it.newest_event_us == ms(row(1, "y", 9, 50)) * 1000


def test_a_keyless_dataset_sinks_every_row_as_a_create() -> None:
    @meta(owner=OWNER)
    @sink(Kafka(name="out").topic("clicks_out", format="json"), cdc="debezium")
    @source(Kafka(name="in").topic("clicks"), disorder="1d", cdc="append")
    @dataset
    class Click:
        uid: int
        ts: datetime

    job = KafkaSinkJob(sink_job([Click]), sink_partitions=2)
    assert not job.stateful
    rows = [{"uid": 1, "ts": T0.isoformat()}, {"uid": 1, "ts": T0.isoformat()}]
    it = job.process(_msgs(rows), MemoryState())
    assert [o.key for o in it.outputs] == [None, None]
    src = {"dataset": "Click", "version": 1}
    assert [json.loads(o.value) for o in it.outputs] == [
        {"payload": {"before": None, "after": rows[0], "op": "c", "ts_ms": ms(rows[0]),
                     "source": src}},
    ] * 2  # fmt: skip
    assert not len(it.writes)


def test_sinks_the_platform_cannot_write_exactly_once_are_refused() -> None:
    from fennel_dagster.commit.executable import PLATFORM_RULES
    from fennel_dagster.commit.validate import validate

    mine = get_settings().kafka_servers
    ok = profile("raw", "changes", mine)
    assert validate(commit_spec("ok", [ok]), None, PLATFORM_RULES) == []
    far = profile("raw", "changes", "elsewhere:9092")
    errors = validate(commit_spec("far", [far]), None, PLATFORM_RULES)
    assert [(e.entity, e.where) for e in errors] == [("Profile", "sink kafka(changes)")]
    assert "another Kafka cluster (elsewhere:9092)" in errors[0].message
    assert mine in errors[0].message and "env=" in errors[0].fix


# --------------------------------------------------------------------------- services


def read_sink(s: Settings, topic: str, partitions: int) -> list[tuple[int, int, bytes, Any]]:
    """Every committed message of the sink topic: (partition, offset, key, value)."""
    c = Consumer({"bootstrap.servers": s.kafka_servers, "group.id": f"sink-{time.time_ns()}",
                  "isolation.level": "read_committed", "enable.auto.commit": False,
                  "enable.partition.eof": True, "auto.offset.reset": "earliest"})  # fmt: skip
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[tuple[int, int, bytes, Any]] = []
    eof: set[int] = set()
    deadline = time.monotonic() + 30
    while len(eof) < partitions and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            eof.add(m.partition())
            continue
        eof.discard(m.partition())
        out.append((m.partition(), m.offset(), m.key(), json.loads(m.value())))
    c.close()
    return out


def by_key(msgs: list[tuple[int, int, bytes, Any]]) -> dict[bytes, list[Any]]:
    out: dict[bytes, list[Any]] = {}
    parts: dict[bytes, set[int]] = {}
    for p, _, k, v in sorted(msgs, key=lambda m: (m[0], m[1])):
        out.setdefault(k, []).append(v)
        parts.setdefault(k, set()).add(p)
    assert all(len(ps) == 1 for ps in parts.values()), parts  # one partition per key
    return out


def produce_changes(s: Settings, raw: str, changes: list[tuple[str, dict[str, Any]]]) -> None:
    """Debezium events on the source topic, a key's in order on one partition."""
    p = Producer({"bootstrap.servers": s.kafka_servers, "enable.idempotence": True})
    for op, r in changes:
        body = {"op": op, "before": r if op == "d" else None, "after": None if op == "d" else r}
        p.produce(raw, json.dumps({"payload": body}).encode(), partition=r["uid"] % 4)
    assert p.flush(30) == 0


@pytest.mark.services
def test_a_kafka_sink_gets_each_change_once_in_order_across_a_restart(
    engine_settings: Settings,
) -> None:
    s = engine_settings
    raw, out = f"{s.namespace}.raw", f"{s.namespace}.changes"
    create_topic(s, raw, 4)
    create_topic(s, out, 3)
    jobs = commit(s, [profile(raw, out, s.kafka_servers)])
    src, snk = jobs["source:Profile"], jobs["kafka_sink:Profile"]
    assert isinstance(snk.spec, plan.KafkaSinkJobSpec) and snk.spec.output_topic == out
    a1, b1, a2, c1 = (
        row(1, "ann", 1, 0),
        row(2, "bob", 1, 0),
        row(1, "ann", 2, 10),
        row(3, "cy", 7, 10),
    )
    b_gone, a3, c2 = row(2, "bob", 1, 20), row(1, "ann", 3, 30), row(3, "cy", 8, 30)
    produce_changes(s, raw, [("c", a1), ("c", b1), ("u", a2), ("c", c1), ("d", b_gone),
                             ("u", a3), ("u", c2)])  # fmt: skip
    k1, k2, k3 = b'{"uid":1}', b'{"uid":2}', b'{"uid":3}'
    first = {
        k1: [event("c", None, a1), event("u", a1, a2), event("u", a2, a3)],
        k2: [event("c", None, b1), event("d", b1, None, at=ms(b_gone))],
        k3: [event("c", None, c1), event("u", c1, c2)],
    }  # fmt: skip
    fleet = Fleet(s)
    fleet.start(src)
    fleet.start(snk)
    try:
        wait_for(lambda: len(read_sink(s, out, 3)) >= 7, 90, "7 change events")
        time.sleep(2)  # anything more would be a duplicate
    finally:
        runners = fleet.stop()
    assert sum(r.stats.outputs for r in runners if r.job.name == snk.name) == 7
    assert by_key(read_sink(s, out, 3)) == first

    # a restart resumes from the committed offsets with the keys' rows in its state
    b2, a4 = row(2, "bea", 4, 40), row(1, "ann", 4, 40)
    produce_changes(s, raw, [("c", b2), ("u", a4)])
    fleet = Fleet(s)
    fleet.start(src)
    fleet.start(snk)
    try:
        wait_for(lambda: len(read_sink(s, out, 3)) >= 9, 90, "9 change events")
        time.sleep(2)
    finally:
        fleet.stop()
    want = {**first, k1: [*first[k1], event("u", a3, a4)], k2: [*first[k2], event("c", None, b2)]}
    got = read_sink(s, out, 3)
    assert len(got) == 9 and by_key(got) == want


@pytest.mark.services
def test_sinks_on_another_cluster_or_snowflake_are_refused_by_the_real_commit(
    engine_settings: Settings,
) -> None:
    s = engine_settings
    far = profile(f"{s.namespace}.raw", "changes", "elsewhere:9092")
    with LocalClient(s) as c, pytest.raises(CommitRejected) as err:
        c.commit("far", datasets=[far])
    text = str(err.value)
    assert "sink kafka(changes)" in text and "another Kafka cluster (elsewhere:9092)" in text

    @meta(owner=OWNER)
    @sink(Snowflake(name="wh").table("changes"), how="incremental")
    @source(Kafka(name="profiles").topic(f"{s.namespace}.raw"), disorder="14d", cdc="upsert")
    @dataset(index=True)
    class Hook:
        uid: int = field(key=True)
        ts: datetime

    with LocalClient(s) as c, pytest.raises(CommitRejected) as err:
        c.commit("hook", datasets=[Hook])
    text = str(err.value)
    assert "sink snowflake(wh)" in text and "does not write snowflake sinks" in text
    MockClient().commit("hook", datasets=[Hook])  # the mock accepts both, writing nothing
    MockClient().commit("far", datasets=[far])


@pytest.mark.services
def test_sigkilled_runners_leave_every_change_on_the_sink_exactly_once(
    engine_settings: Settings,
) -> None:
    s = engine_settings
    raw, out = f"{s.namespace}.raw", f"{s.namespace}.changes"
    create_topic(s, raw, 4)
    create_topic(s, out, 3)
    commit(s, [profile(raw, out, s.kafka_servers)])
    keys, waves, per_wave = 12, 5, 120
    rnd = random.Random(5)
    rows: dict[int, list[tuple[str, dict[str, Any]]]] = {}
    minute = 0
    os.environ["FENNEL_ENGINE_CRASH"] = "mid_batch:0.05,after_commit:0.05,during_snapshot:0.3"
    sup = Supervisor(s, engine_id="sink-crashy")
    t = threading.Thread(target=sup.serve, daemon=True)
    t.start()
    kills = 0
    live: dict[int, dict[str, Any]] = {}
    try:
        for _ in range(waves):
            changes = []
            for _ in range(per_wave):
                minute += 1
                uid = rnd.randrange(keys)
                if uid in live and rnd.random() < 0.2:
                    changes.append(("d", row(uid, live.pop(uid)["name"], 0, minute)))
                else:
                    r = row(uid, f"n{minute}", minute, minute)
                    changes.append(("u" if uid in live else "c", r))
                    live[uid] = r
                rows.setdefault(uid, []).append(changes[-1])
            produce_changes(s, raw, changes)
            kills += kill_at_random(sup, 2.5, rnd)
        os.environ.pop("FENNEL_ENGINE_CRASH")
        kill_all(sup)  # restart every runner without crash points
        total = waves * per_wave
        wait_for(lambda: len(read_sink(s, out, 3)) >= total, 240, "every change event")
        time.sleep(3)
    finally:
        os.environ.pop("FENNEL_ENGINE_CRASH", None)
        sup.stop()
        t.join(120)
    assert kills >= 10, f"only {kills} kills"
    want: dict[bytes, list[Any]] = {}
    for uid, changes in rows.items():
        prev: dict[str, Any] | None = None
        for op, r in changes:
            if op == "d":
                e, prev = event("d", prev, None, at=ms(r)), None
            else:
                e, prev = event("u" if prev else "c", prev, r), r
            want.setdefault(dumps({"uid": uid}), []).append(e)
    got = read_sink(s, out, 3)
    assert len(got) == total
    assert by_key(got) == want
