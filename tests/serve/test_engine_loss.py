"""An engine killed under load: queries for partitions other engines own keep answering;
the dead engine's partitions fail fast with a clear 503 naming them, and answer again once
its runners are back. Two real engine processes (SIGKILL), a real server, real HTTP."""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pandas as pd
import pytest

from fennel_dagster import dataset, feature, featureset, field, meta, source
from fennel_dagster.client import Client, LocalClient
from fennel_dagster.engine.lookup_client import EngineUnavailable
from fennel_dagster.metadata import registry
from fennel_dagster.metadata.db import connect
from fennel_dagster.settings import Settings
from fennel_dagster.sources import Webhook
from tests.engine.harness import engine_process, wait_for
from tests.platform import drop_platform
from tests.serve.conftest import start_server

pytestmark = pytest.mark.services
hook = Webhook(name="loss_hook")


@meta(owner="serving@example.com")
@source(hook.endpoint("profiles"), disorder="1d", cdc="upsert")
@dataset(index=True)
class Profile:
    uid: int = field(key=True)
    country: str
    ts: datetime


@meta(owner="serving@example.com")
@featureset
class Person:
    uid: int
    country: str = feature(Profile.country, default="?")


@pytest.fixture
def two_engines(live_stack: Settings, tmp_path: Path) -> Iterator[tuple[Settings, Path]]:
    name = f"k{uuid.uuid4().hex[:10]}"
    s = live_stack.with_(pg_schema=name, namespace=name, partitions=4, state_dir=tmp_path / "state",
                         engine_snapshot_interval_s=5.0, engine_txn_interval_ms=50,
                         engine_poll_interval_s=0.5, engine_lease_s=4.0)  # fmt: skip
    with LocalClient(s) as c:
        c.recover(wait=0)
    yield s, tmp_path
    drop_platform(s)


def _owner_of_each_uid(s: Settings, uids: list[int]) -> dict[int, str]:
    from fennel_dagster.engine import lookups

    with connect(s, s.pg_schema) as conn, conn.transaction():
        job = lookups.serving_job(registry.branch_jobs(conn, "main"), "Profile")
        owners = registry.runner_owners(conn)
    parts = lookups.partitions_of(job, pd.DataFrame({"uid": uids}))
    return {u: owners.get((job.hash, p), ("", 0.0))[0] for u, p in zip(uids, parts, strict=True)}


def test_a_killed_engine_fails_its_partitions_fast_and_spares_the_rest(two_engines) -> None:  # type: ignore[no-untyped-def]
    s, tmp = two_engines
    engines = {e: engine_process(s, e, str(tmp / f"{e}.log")) for e in ("eng-a", "eng-b")}
    server = start_server(s, tmp / "server.log")
    try:
        admin = Client(server.url, server.token("admin", ("admin",)))
        admin.commit("loss", datasets=[Profile], featuresets=[Person])
        uids = list(range(1, 41))
        now = pd.Timestamp.now(tz="UTC")
        admin.log("loss_hook", "profiles", pd.DataFrame(
            {"uid": uids, "country": [f"c{u}" for u in uids], "ts": [now] * len(uids)}))  # fmt: skip

        # a client that has not committed: no 503 is taken for partitions still starting (the
        # committing client retries those for a while), so a lost engine shows at once
        reader = Client(server.url, server.token("reader", ("query",)))

        def query(us: list[int]) -> list[str]:
            df = reader.query(["Person.uid"], ["Person.country"], pd.DataFrame({"Person.uid": us}))
            return df["Person.country"].tolist()

        def all_served() -> bool:
            try:
                return query(uids) == [f"c{u}" for u in uids]
            except EngineUnavailable:
                return False

        wait_for(all_served, 240, "every profile served")
        owner = _owner_of_each_uid(s, uids)
        assert set(owner.values()) == {"eng-a", "eng-b"}, owner  # both engines own partitions
        on_a = [u for u in uids if owner[u] == "eng-a"]
        on_b = [u for u in uids if owner[u] == "eng-b"]

        os.kill(engines["eng-b"].pid, signal.SIGKILL)
        engines["eng-b"].wait(10)
        # the survivors' keys keep answering, throughout
        for _ in range(10):
            assert query(on_a) == [f"c{u}" for u in on_a]
        # the dead engine's keys fail fast and say which partition is down
        start = time.monotonic()
        with pytest.raises(EngineUnavailable) as refused:
            for _ in range(50):  # until the server has noticed (it may route to the dead port)
                query(on_b)
        assert time.monotonic() - start < 10
        assert "Profile" in str(refused.value) and "partition" in str(refused.value)
        engines["eng-b"] = engine_process(s, "eng-b", str(tmp / "eng-b.log"))
        wait_for(all_served, 240, "the dead engine's partitions served again")
    finally:
        server.process.terminate()
        for p in engines.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in engines.values():
            try:
                p.wait(60)
            except Exception:  # noqa: BLE001
                p.kill()
