"""One suite of behaviours, run against every client: ``MockClient``, ``LocalClient`` (the
platform in process) and the HTTP ``Client`` in front of a real query server, over one real
platform (Postgres, Kafka, an engine) committed once for the whole module.

Each behaviour is Fennel's client contract: what commit, log and the branch operations answer
(a ``Response``), what a branch holds after init, clone and delete, the answers of lookups
(also ``Dataset.lookup`` called from test code, and keys given as ints for a str key), of
inspect and get_dataset_df, that a webhook's rows reach every branch sourcing it, and the
errors (all ``FennelError``) for unknown datasets and missing branches."""

from __future__ import annotations

import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pandas as pd
import pytest

from fennel_dagster import dataset, field
from fennel_dagster.api import FennelClient, LogResult, Response, ResponseError
from fennel_dagster.client import Client, LocalClient
from fennel_dagster.commit.errors import BranchNotSynced
from fennel_dagster.engine.supervisor import Supervisor
from fennel_dagster.errors import ClientError, FennelError
from fennel_dagster.mock import MockClient
from fennel_dagster.settings import Settings
from fennel_dagster.sources import Webhook, source
from tests.platform import drop_platform
from tests.serve.conftest import Serving, start_server

pytestmark = pytest.mark.services

__owner__ = "conformance@example.com"  # Fennel's module-level owner
WEBHOOK = Webhook(name="conformance")
T0 = datetime(2024, 1, 1, tzinfo=UTC)
KINDS = ("mock", "local", "http")


@source(WEBHOOK.endpoint("Member"), disorder="14d", cdc="upsert")
@dataset(index=True)
class Member:
    uid: str = field(key=True)
    age: int
    city: str
    ts: datetime


@source(WEBHOOK.endpoint("Ping"), disorder="14d", cdc="upsert")
@dataset(index=True)
class Ping:
    pid: int = field(key=True)
    note: str
    ts: datetime


@source(WEBHOOK.endpoint("Erasable"), disorder="14d", cdc="upsert")
@dataset(index=True)
class Erasable:
    uid: str = field(key=True, erase_key=True)
    age: int
    ts: datetime


DATASETS = [Member, Ping]
MEMBERS = pd.DataFrame({
    "uid": ["1", "2", "3", "1"], "age": [30, 40, 50, 31], "city": ["a", "b", "c", "d"],
    "ts": [T0, T0 + pd.Timedelta(hours=1), T0 + pd.Timedelta(hours=2), T0 + pd.Timedelta(hours=3)],
})  # fmt: skip
LATER = pd.Timestamp(T0) + pd.Timedelta(days=1)


def _until(check: Callable[[], bool], what: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except FennelError:
            pass
        assert time.monotonic() < deadline, f"the platform did not {what} in {timeout:g} s"
        time.sleep(0.3)


# ---------------------------------------------------------------- one platform for the module


@pytest.fixture(scope="module")
def platform(live_stack: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    name = f"c{uuid.uuid4().hex[:10]}"
    s = live_stack.with_(
        pg_schema=name, namespace=name, partitions=2,
        state_dir=tmp_path_factory.mktemp("state"), engine_snapshot_interval_s=5.0,
        engine_txn_interval_ms=50, engine_poll_interval_s=0.5, engine_lease_s=5.0,
    )  # fmt: skip
    with LocalClient(s) as c:
        c.recover(wait=0)  # migrates the schema
    sup = Supervisor(s, engine_id="conformance")
    sup.start_lookups()
    t = threading.Thread(target=sup.serve, daemon=True)
    t.start()
    yield s
    sup.stop()
    t.join(120)
    drop_platform(s)


@pytest.fixture(scope="module")
def serving(platform: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serving]:
    srv = start_server(platform, tmp_path_factory.mktemp("serve") / "server.log")
    yield srv
    srv.process.terminate()
    try:
        srv.process.wait(20)
    except subprocess.TimeoutExpired:
        srv.process.kill()


@pytest.fixture(scope="module")
def committed(serving: Serving) -> Iterator[dict[str, FennelClient]]:
    """The repo committed once through the HTTP client, its rows logged and served; a mock
    with the same commit and rows beside it."""
    http = Client(serving.url, serving.token("admin", ("admin",)))
    local = LocalClient(serving.settings, on_progress=lambda line: None)
    mock = MockClient()
    for c in (mock, http):
        done = c.commit("conformance", datasets=DATASETS)
        assert isinstance(done, Response) and done.status_code == 200 and done.ok
    for c in (mock, http):
        c.log("conformance", "Member", MEMBERS)
    keys = pd.DataFrame({"uid": ["1", "2", "3"]})
    _until(lambda: bool(local.lookup(Member, keys)[1].all()), "serve the logged rows")
    _until(lambda: len(local.get_dataset_df(Member)) == len(MEMBERS), "write the dataset topic")
    yield {"mock": mock, "local": local, "http": http}
    local.close()
    http.close()


@pytest.fixture(params=KINDS)
def client(request: pytest.FixtureRequest, committed: dict[str, FennelClient]) -> FennelClient:
    c = committed[request.param]
    c.checkout("main")
    return c


def _kind(client: FennelClient) -> str:
    return {MockClient: "mock", LocalClient: "local", Client: "http"}[type(client)]


def _values(df: pd.DataFrame) -> list[tuple[Any, ...]]:
    """Rows as plain values (each client types its columns in its own pandas dtypes)."""
    out = []
    for rec in df.astype(object).to_dict("records"):
        out.append(tuple(pd.Timestamp(v).tz_convert("UTC") if isinstance(v, datetime | pd.Timestamp)
                         else v for v in rec.values()))  # fmt: skip
    return out


# ---------------------------------------------------------------- the suite


def test_every_client_is_a_fennel_client(client: FennelClient) -> None:
    assert isinstance(client, FennelClient)
    assert client.branch() == "main" and "main" in client.list_branches()


def test_commit_and_log_answer_responses(client: FennelClient) -> None:
    preview = client.commit("again", datasets=DATASETS, preview=True)
    assert isinstance(preview, Response) and preview.status_code == 200 and preview.ok
    assert isinstance(preview.json(), dict) and preview["status_code"] == 200
    preview.raise_for_status()
    pings = pd.DataFrame({"pid": [1, 2], "note": ["x", "y"], "ts": [T0, T0]})
    logged = client.log("conformance", "Ping", pings)
    assert isinstance(logged, LogResult) and logged.status_code == 200 and logged.ok
    assert logged.json()["accepted"] == 2 and '"accepted": 2' in logged.text


def test_lookup_answers(client: FennelClient) -> None:
    keys = pd.DataFrame({"uid": ["1", "3", "9"]})
    rows, found = client.lookup(Member, keys, timestamps=pd.Series([LATER] * 3))
    assert found.tolist() == [True, True, False]
    assert isinstance(rows, pd.DataFrame)
    assert rows["age"].tolist()[:2] == [31, 50] and pd.isna(rows["age"].tolist()[2])
    assert rows["city"].tolist()[:2] == ["d", "c"]
    age, found = client.lookup("Member", keys, fields=["age"])
    assert isinstance(age, pd.Series) and age.name == "age" and age.tolist()[:2] == [31, 50]
    before, found = client.lookup(Member, keys, timestamps=pd.Series([T0] * 3))
    assert found.tolist() == [True, False, False] and before["age"].tolist()[0] == 30
    as_ints, found = client.lookup(Member, pd.DataFrame({"uid": [1, 2]}))  # a str key: cast
    assert found.tolist() == [True, True] and as_ints["uid"].tolist() == ["1", "2"]
    assert as_ints["age"].tolist() == [31, 40]


def test_dataset_lookup_from_test_code_is_answered_by_the_client_that_committed(
    client: FennelClient,
) -> None:
    client.commit("conformance", datasets=DATASETS)  # the same definitions: binds the client
    ts = pd.Series([LATER, LATER, T0])
    rows, found = Member.lookup(ts, uid=pd.Series(["2", "9", "1"]))  # type: ignore[attr-defined]
    assert found.tolist() == [True, False, True]
    assert rows["age"].tolist()[0] == 40 and rows["age"].tolist()[2] == 30
    ages, _ = Member.lookup(ts, fields=["age"], uid=pd.Series([2, 9, 1]))  # type: ignore[attr-defined]
    assert list(ages.columns) == ["age"] and ages["age"].tolist()[2] == 30


def test_inspect_and_get_dataset_df(client: FennelClient) -> None:
    want = _values(MEMBERS.sort_values("ts"))
    assert _values(client.get_dataset_df("Member")) == want
    newest = client.inspect(Member, n=2)
    assert isinstance(newest, pd.DataFrame) and list(newest.columns) == ["uid", "age", "city", "ts"]
    assert _values(newest) == want[-2:]
    assert len(client.inspect("Member")) == len(MEMBERS)
    with pytest.raises(FennelError, match="n must be at least 1|positive integer"):
        client.inspect(Member, n=0)


def test_unknown_datasets_are_errors_naming_them(client: FennelClient) -> None:
    keys = pd.DataFrame({"uid": ["1"]})
    calls: list[Callable[[], object]] = [
        lambda: client.lookup("Nope", keys),
        lambda: client.inspect("Nope"),
        lambda: client.get_dataset_df("Nope"),
        lambda: client.erase("Nope", keys),
    ]
    for call in calls:
        with pytest.raises(FennelError, match="Nope.*not committed"):
            call()


def test_erase(client: FennelClient) -> None:
    """The mock erases keys; the platform commits erase keys (they change nothing until an
    erase) and refuses ``erase()`` by name, rather than answer as done."""
    keys = pd.DataFrame({"uid": ["2"]})
    branch = f"{_kind(client)}-erase"
    client.clone_branch(branch, from_branch="main")
    try:
        client.commit(message="erase keys", datasets=[*DATASETS, Erasable])
        if _kind(client) != "mock":
            with pytest.raises(
                ClientError, match=r"erase\(Erasable\): the platform does not erase"
            ):
                client.erase(Erasable, keys)
            return
        client.log("conformance", "Erasable", MEMBERS[["uid", "age", "ts"]])
        done = client.erase(Erasable, keys)
        assert isinstance(done, Response) and done.status_code == 200
        assert client.lookup(Erasable, keys)[1].tolist() == [False]
    finally:
        client.checkout("main")
        client.delete_branch(branch)


def test_branches_init_clone_checkout_delete(client: FennelClient) -> None:
    p = _kind(client)
    keys = pd.DataFrame({"uid": ["1", "2"]})
    want, _ = client.lookup(Member, keys, timestamps=pd.Series([LATER] * 2))

    cloned = client.clone_branch(f"{p}-clone", from_branch="main")  # definitions and data
    assert isinstance(cloned, Response) and cloned.status_code == 200 and cloned.ok
    assert client.branch() == f"{p}-clone" and f"{p}-clone" in client.list_branches()
    got, found = client.lookup(Member, keys, timestamps=pd.Series([LATER] * 2))
    assert found.tolist() == [True, True] and _values(got) == _values(want)

    empty = client.init_branch(f"{p}-empty")  # nothing committed: no datasets
    assert isinstance(empty, Response) and empty.status_code == 200
    assert client.branch() == f"{p}-empty"
    with pytest.raises(FennelError, match="Member.*not committed"):
        client.lookup(Member, keys)
    with pytest.raises(FennelError, match="already exists"):
        client.init_branch(f"{p}-clone")

    client.checkout(f"{p}-missing")  # only named, as Fennel's clients do
    assert client.branch() == f"{p}-missing" and f"{p}-missing" not in client.list_branches()
    with pytest.raises(BranchNotSynced, match=f"Branch: `{p}-missing` not found, please sync"):
        client.lookup(Member, keys)

    client.checkout("main")
    for name in (f"{p}-clone", f"{p}-empty"):
        deleted = client.delete_branch(name)
        assert isinstance(deleted, Response) and deleted.status_code == 200
        assert name not in client.list_branches()
    assert client.branch() == "main"
    with pytest.raises(FennelError, match="Cannot delete the main branch."):
        client.delete_branch("main")
    with pytest.raises(FennelError, match="does not exist"):
        client.delete_branch(f"{p}-clone")


def test_webhook_rows_reach_every_branch_that_sources_it(client: FennelClient) -> None:
    """Logged from a branch with no dataset on the webhook, the rows reach main's."""
    p = _kind(client)
    pid = 100 + KINDS.index(p)
    client.init_branch(f"{p}-bare")
    logged = client.log("conformance", "Ping", pd.DataFrame({"pid": [pid], "note": [p],
                                                            "ts": [T0]}))  # fmt: skip
    assert logged.status_code == 200
    client.checkout("main")
    client.delete_branch(f"{p}-bare")
    keys = pd.DataFrame({"pid": [pid]})
    _until(lambda: bool(client.lookup(Ping, keys)[1].all()), "route the rows to main", 60)
    assert client.lookup(Ping, keys, fields=["note"])[0].tolist() == [p]


def test_a_token_logs_only_where_it_may_log_every_branch_the_rows_reach(
    committed: dict[str, FennelClient], serving: Serving
) -> None:
    """Over HTTP: the rows reach main's datasets too, so a token limited to other branches
    is refused, naming main, and no row is sent."""
    admin = committed["http"]
    admin.init_branch("limited-bare")
    admin.checkout("main")
    token = serving.token("limited", ("log", "query"), branches=("limited-*",))
    rows = pd.DataFrame({"pid": [999], "note": ["no"], "ts": [T0]})
    with Client(serving.url, token, branch="limited-bare") as limited:
        with pytest.raises(ResponseError, match="may not use branch 'main'") as e:
            limited.log("conformance", "Ping", rows)
        assert e.value.status == 403
    admin.delete_branch("limited-bare")
    time.sleep(2)  # what the engine would have read by now, had a row been sent
    assert not admin.lookup(Ping, pd.DataFrame({"pid": [999]}))[1].any()
