"""Server errors found by running Fennel's integration tests against a real engine and query
server: each is reproduced here over real HTTP, Kafka and Postgres, and must stay fixed.

- a webhook's inbox topic deleted (its branch deleted) and created again by the next commit:
  the server's long-lived Kafka producer still believed the topic gone and answered logs with
  a 500 ``Unknown topic`` for minutes;
- a log to a webhook that does not exist is a 4xx naming it and the fix;
- a query whose Python extractor returns struct values: the executor process could not
  pickle the shipped struct class back (a 500 ``PicklingError``);
- a logged row too large for a Kafka message, a lookup's non-string field: 500s, now 400s.

No ``from __future__ import annotations``: the featureset's fields name a struct, which
string annotations would leave unresolved.
"""

import time
import uuid
from datetime import datetime
from typing import Optional

import httpx
import pandas as pd
import pytest
from confluent_kafka.admin import AdminClient

from fennel_dagster import dataset, extractor, featureset, field, inputs, meta, outputs, source
from fennel_dagster.client import Client
from fennel_dagster.client.http import ServerError
from fennel_dagster.declare.dtypes import as_json
from fennel_dagster.dtypes import struct
from fennel_dagster.mock import MockClient
from fennel_dagster.settings import Settings
from fennel_dagster.sources import Webhook
from tests.engine.harness import wait_for
from tests.serve.conftest import Serving

pytestmark = pytest.mark.services

HOOK = f"errs_{uuid.uuid4().hex[:8]}"  # its own inbox topics: no other test shares them


@meta(owner="errors@example.com")
@source(Webhook(name=HOOK).endpoint("Events"), disorder="1d", cdc="upsert")
@dataset(index=True)
class Events:
    uid: int = field(key=True)
    score: float
    at: datetime


def _events(n: int, base: int = 0) -> pd.DataFrame:
    return pd.DataFrame({
        "uid": range(base, base + n), "score": [float(i) / 2 for i in range(n)],
        "at": pd.Timestamp("2026-11-01", tz="UTC") + pd.to_timedelta(range(n), unit="s"),
    })  # fmt: skip


def _found(admin: Client, uids: list[int]) -> bool:
    at = pd.Series([pd.Timestamp("2026-12-01", tz="UTC")] * len(uids))
    try:
        return bool(admin.lookup("Events", pd.DataFrame({"uid": uids}), timestamps=at)[1].all())
    except LookupError:
        return False


def _inbox_topic(s: Settings) -> str:
    names = AdminClient({"bootstrap.servers": s.kafka_servers}).list_topics(timeout=10).topics
    found = [t for t in names if t.startswith(f"{s.namespace}.webhook.") and HOOK in t]
    assert len(found) == 1, found
    return found[0]


def _producers_made(serving: Serving) -> float:
    text = httpx.get(f"{serving.url}/metrics", timeout=10).text
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith("fennel_query_server_inbox_producers_total"))  # fmt: skip


def test_logs_to_a_deleted_inbox_topic_are_4xx_and_one_right_after_the_recommit_lands(
    serving: Serving,
) -> None:
    """The server's producer meets a deleted inbox topic (here deleted behind the platform's
    back, so the graph still names it). librdkafka queues rows for it, fails them ~35 s
    later and then refuses produces at once with ``Unknown topic``: before, one log waited
    30 s and was a 400 without the fix, the next was reported accepted while its rows were
    dropped, the next a 500 ``KafkaException``. Now every log to the gone topic is a 4xx
    naming the webhook and the fix within seconds, none of its rows arrives later, the
    branch is deleted and the dataset committed again, and a log right then lands."""
    s = serving.settings
    branch = f"hook-{uuid.uuid4().hex[:6]}"
    admin = Client(serving.url, serving.token("errs-admin", ("admin",)), branch=branch)
    admin.init_branch(branch)
    admin.commit("events", datasets=[Events])
    assert admin.log(HOOK, "Events", _events(5)).accepted == 5
    kafka = AdminClient({"bootstrap.servers": s.kafka_servers})
    for f in kafka.delete_topics([_inbox_topic(s)]).values():
        f.result(30)
    made = _producers_made(serving)

    outcomes: list[object] = []
    start = time.monotonic()
    while time.monotonic() - start < 45:  # past the moment librdkafka gives the topic up
        try:
            outcomes.append(admin.log(HOOK, "Events", _events(2, base=50 + 2 * len(outcomes))))
        except ServerError as e:
            outcomes.append(e)
    admin.delete_branch(branch)
    try:
        admin.log(HOOK, "Events", _events(5))
    except ServerError as e:
        outcomes.append(e)
    admin.init_branch(branch)
    admin.commit("events again", datasets=[Events])
    rows = _events(4, base=1000)
    try:
        assert admin.log(HOOK, "Events", rows).accepted == 4, "a log right after the recommit"
        statuses = [getattr(e, "status", e) for e in outcomes]
        for e in outcomes:
            assert isinstance(e, ServerError) and 400 <= e.status < 500, (statuses, outcomes)
            assert f"{HOOK}.Events" in str(e) and "commit" in str(e), e
        assert _producers_made(serving) > made  # a producer that held refused rows retired
        wait_for(lambda: _found(admin, list(rows.uid)), 120, "logged rows in the dataset")
        assert not _found(admin, [50]), "a refused log's row arrived after all"
        admin.log(HOOK, "Events", _events(3, base=2000))  # the producer goes on serving
        wait_for(lambda: _found(admin, [2000, 2001, 2002]), 120, "later rows in the dataset")
    finally:
        admin.delete_branch(branch)


def _class_names(value: object) -> object:
    if isinstance(value, list):
        return [_class_names(v) for v in value]
    return type(value).__name__ if not pd.isna(value) else None


def test_struct_values_from_a_python_extractor_come_back_as_the_mocks(serving: Serving) -> None:
    """Declared in the test, as Fennel's tests declare them: the executor process builds the
    struct class from the shipped source, under no module the server can import."""

    @struct
    class ShippedPair:
        n: int
        label: str
        at: datetime

    @meta(owner="errors@example.com")
    @featureset
    class Shaped:
        uid: int
        pair: ShippedPair
        pairs: list[ShippedPair]
        maybe: Optional[ShippedPair]  # noqa: UP045 - Fennel's spelling

        @extractor
        @inputs("uid")
        @outputs("pair", "pairs", "maybe")
        def shape(cls, ts: pd.Series, uid: pd.Series):
            t0 = pd.Timestamp("2026-01-01", tz="UTC")
            pair = [
                ShippedPair(n=int(u), label=f"u{u}", at=t0 + pd.Timedelta(seconds=int(u)))
                for u in uid
            ]
            pairs = [
                [ShippedPair(n=i, label=str(i), at=t0) for i in range(int(u) % 3)] for u in uid
            ]
            maybe = [p if p.n % 2 else None for p in pair]
            return pd.DataFrame({"pair": pair, "pairs": pairs, "maybe": maybe})

    branch = f"structs-{uuid.uuid4().hex[:6]}"
    admin = Client(serving.url, serving.token("errs-admin", ("admin",)), branch=branch)
    admin.init_branch(branch)
    admin.commit("shaped", featuresets=[Shaped])
    mock = MockClient()
    mock.commit("shaped", featuresets=[Shaped])
    uids = pd.DataFrame({"Shaped.uid": [1, 2, 3, 4, 5]})
    try:
        got = admin.query(["Shaped.uid"], [Shaped], uids)
        want = mock.query(["Shaped.uid"], [Shaped], uids)
        assert list(got.columns) == list(want.columns)
        for c in want.columns:  # the same fields, in objects of a struct class named alike
            assert [as_json(v) for v in got[c]] == [as_json(v) for v in want[c]], c
            if c != "Shaped.uid":
                assert [_class_names(v) for v in got[c]] == [_class_names(v) for v in want[c]]
        assert got["Shaped.pair"][2].label == "u3"
        assert pd.isna(got["Shaped.maybe"][1]) and got["Shaped.maybe"][0].label == "u1"
    finally:
        admin.delete_branch(branch)


def test_bad_input_on_the_way_is_a_4xx_naming_the_field(serving: Serving) -> None:
    """A logged row too large for a Kafka message (before: a 500 ``KafkaException``) and a
    lookup asking a field by a non-string (before: a 500 ``TypeError``)."""
    branch = f"bad-{uuid.uuid4().hex[:6]}"
    token = serving.token("errs-admin", ("admin",))
    admin = Client(serving.url, token, branch=branch)
    admin.init_branch(branch)
    try:
        admin.commit("events", datasets=[Events])
        big = _events(2).assign(blob=["x" * 1_100_000, "y"])
        with pytest.raises(ServerError) as too_big:
            admin.log(HOOK, "Events", big)
        assert too_big.value.status == 400 and "row 0" in str(too_big.value), too_big.value
        assert "shrink" in str(too_big.value)
        assert admin.log(HOOK, "Events", _events(2)).accepted == 2  # the writer goes on
        resp = httpx.post(
            f"{serving.url}/api/v1/dataset/Events/lookup",
            json={"keys": {"uid": [1]}, "fields": [{"score": 1}]},
            headers={"Authorization": f"Bearer {token}", "X-FENNEL-BRANCH": branch},
            timeout=30,
        )
        assert resp.status_code == 400 and "fields" in resp.json()["error"], resp.text
    finally:
        admin.delete_branch(branch)
