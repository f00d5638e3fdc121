"""``client.sleep()`` is a barrier on the real stack: rows logged through the query server go
webhook inbox -> source job -> pipeline (a repartition on the key) -> aggregate, and once
``sleep()`` returns every one of them is counted; without it, a lookup right after ``log``
sees fewer. A commit through the server answers once engines serve its partitions, so the
next lookup never meets a 503. A job partition that has processed nothing is not caught up:
the barrier times out naming it."""

from __future__ import annotations

import time
import uuid
from datetime import datetime

import pandas as pd
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from fennel_dagster import dataset, field, inputs, meta, pipeline, source
from fennel_dagster.aggregate import Count
from fennel_dagster.client import Client, LocalClient
from fennel_dagster.declare import commit_spec
from fennel_dagster.engine.barrier import Barrier, BarrierTimeout
from fennel_dagster.metadata.registry import of_spec
from fennel_dagster.settings import Settings
from fennel_dagster.sources import Webhook
from fennel_dagster.window import Continuous
from fennel_dagster.wire import plan
from tests.serve.conftest import Serving

pytestmark = pytest.mark.services
hook = Webhook(name="barrier_hook")
N = 3000
USERS = 40


@meta(owner="barrier@example.com")
@source(hook.endpoint("clicks"), disorder="14d", cdc="append")
@dataset
class Click:
    uid: int
    page: str
    ts: datetime


@meta(owner="barrier@example.com")
@dataset(index=True)
class ClickCount:
    uid: int = field(key=True)
    clicks: int
    ts: datetime

    @pipeline
    @inputs(Click)
    def count(cls, click):
        return click.groupby("uid").aggregate(clicks=Count(window=Continuous("forever")))


def _clicks(start: int, n: int) -> pd.DataFrame:
    now = pd.Timestamp.now(tz="UTC").floor("s")
    return pd.DataFrame({
        "uid": [(start + i) % USERS for i in range(n)],
        "page": [f"p{i % 7}" for i in range(n)],
        "ts": [now - pd.Timedelta(seconds=i % 600) for i in range(n)],
    })  # fmt: skip


def _counted(client: Client | LocalClient) -> int:
    keys = pd.DataFrame({"uid": list(range(USERS))})
    df, found = client.lookup("ClickCount", keys)
    return int(df.clicks[found].sum()) if found.any() else 0


def test_sleep_waits_until_every_logged_row_is_counted(serving: Serving) -> None:
    admin = Client(serving.url, serving.token("barrier", ("admin",)))
    admin.init_branch(f"barrier-{uuid.uuid4().hex[:6]}")
    answer = admin.commit("barrier", datasets=[Click, ClickCount])
    assert answer.json()["ready"] is True and answer.json()["starting"] == []
    assert _counted(admin) == 0  # served at once: no 503 after the commit
    admin.log("barrier_hook", "clicks", _clicks(0, N))
    seen_before = _counted(admin)  # no barrier: the engine is still at it
    admin.sleep()
    assert _counted(admin) == N, "sleep returned before every logged row was processed"
    assert seen_before < N, "the rows were counted before sleep: this test cannot fail"
    # a second round: the barrier waits for what was logged since, not only the first time
    admin.log("barrier_hook", "clicks", _clicks(N, N))
    admin.sleep()
    assert _counted(admin) == 2 * N
    # and the LocalClient's barrier agrees, on the same branch
    with LocalClient(serving.settings, branch=admin.branch()) as local:
        local.log("barrier_hook", "clicks", _clicks(0, 500))
        report = local.sleep(timeout=60)
        assert report.partitions >= 4  # source, pipeline and index jobs, 2 partitions each
        assert _counted(local) == 2 * N + 500


def test_sleep_route_refuses_a_bad_timeout(serving: Serving) -> None:
    admin = Client(serving.url, serving.token("barrier-bad", ("admin",)))
    with pytest.raises(Exception, match="timeout: seconds between"):
        admin._call("POST", "/api/v1/sleep", json={"timeout": "soon"})


def test_a_partition_that_processed_nothing_is_behind(live_stack: Settings) -> None:
    """No runner ever consumed the topic: the barrier times out naming the job partition
    (and returns at once for an empty topic)."""
    s = live_stack
    topic = f"barrier-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": s.kafka_servers})
    for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        f.result()
    job = of_spec("h-idle", plan.IndexJobSpec(
        name=f"idle-{topic}", partitions=1, dataset=commit_spec("idle", [Click], []).datasets[0], input_topic=topic,
        error_topic="", replaylog="",
    ))  # fmt: skip
    Barrier(s, [job]).wait(timeout=5)  # nothing logged: caught up at once
    p = Producer({"bootstrap.servers": s.kafka_servers})
    p.produce(topic, b'{"uid": 1}', partition=0)
    assert p.flush(10) == 0
    t0 = time.monotonic()
    with pytest.raises(BarrierTimeout) as e:
        Barrier(s, [job]).wait(timeout=2)
    assert time.monotonic() - t0 < 20
    assert f"idle-{topic} p0 on {topic}[0]: nothing processed, target 1" in str(e.value)
    assert e.value.behind[0].committed is None
