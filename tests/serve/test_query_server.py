"""The query server over real HTTP, in front of a real engine: the example repo's features
over REST and GraphQL equal the mock's; ``explain`` is the planner's plan; lookups and logs
go through it; a commit through it is visible to the next query."""

from __future__ import annotations

import pandas as pd
import pytest

from examples.payments.datasets import DATASETS
from examples.payments.featuresets import FEATURESETS
from fennel_dagster.client import Client
from fennel_dagster.client.http import ServerError
from fennel_dagster.commit.errors import BranchNotSynced
from fennel_dagster.errors import FennelError
from fennel_dagster.mock import MockClient
from fennel_dagster.query.plan import plan_query
from tests.serve.conftest import Serving

pytestmark = pytest.mark.services


def _rows(ev, at):  # type: ignore[no-untyped-def]
    t = ev.transactions.head(40)
    return pd.DataFrame({
        "UserFeatures.uid": t.uid.to_numpy(), "TxnFeatures.uid": t.uid.to_numpy(),
        "TxnFeatures.merchant_id": t.merchant_id.to_numpy(), "TxnFeatures.amount": t.amount.to_numpy(),
    }), pd.Series([at] * len(t))  # fmt: skip


def _same(got: pd.DataFrame, want: pd.DataFrame) -> None:
    assert list(got.columns) == list(want.columns)
    for c in want.columns:
        g, w = got[c].astype(object).tolist(), want[c].astype(object).tolist()
        if pd.api.types.is_float_dtype(want[c]):
            assert [round(float(x), 6) for x in g] == [round(float(x), 6) for x in w], c
        else:
            assert g == w, c


def test_rest_query_equals_the_mock_for_every_featureset(loaded) -> None:  # type: ignore[no-untyped-def]
    admin, mock, ev, at = loaded
    rows, ts = _rows(ev, at)
    for fs, inputs in (("UserFeatures", ["UserFeatures.uid"]),
                       ("TxnFeatures", ["TxnFeatures.uid", "TxnFeatures.merchant_id",
                                        "TxnFeatures.amount", "UserFeatures.uid"])):  # fmt: skip
        got = admin.query(inputs, [fs], rows[inputs], ts)
        want = mock.query(inputs, [fs], rows[inputs], ts)
        _same(got, want)


def test_explain_is_the_planners_plan(loaded, serving: Serving) -> None:  # type: ignore[no-untyped-def]
    admin, mock, _, _ = loaded
    inputs = [
        "TxnFeatures.uid",
        "TxnFeatures.merchant_id",
        "TxnFeatures.amount",
        "UserFeatures.uid",
    ]
    plan = plan_query(list(mock.featuresets.values()), inputs, ["TxnFeatures"])
    got = admin.explain(inputs, ["TxnFeatures"])
    assert [s["extractor"] for s in got["steps"]] == [
        f"{x.featureset}.{x.name}" for x in plan.steps
    ]
    assert got["outputs"] == list(plan.outputs)
    assert {s["runs_in"] for s in got["steps"]} == {"executor process"}  # risk is Python
    gql = admin.graphql("query($i: [String!]!, $o: [String!]!) { explain(inputs: $i, outputs: $o)"
                        " { outputs steps { extractor kind lookups runsIn } } }",
                        {"i": inputs, "o": ["TxnFeatures"]})  # fmt: skip
    steps = gql["data"]["explain"]["steps"]
    assert [s["extractor"] for s in steps] == [s["extractor"] for s in got["steps"]]
    assert any(s["lookups"] == ["MerchantVolume", "UserSpend"] for s in steps)


def test_graphql_featureset_types_answer_like_rest(loaded) -> None:  # type: ignore[no-untyped-def]
    admin, mock, ev, at = loaded
    uid = int(ev.transactions.uid.iloc[0])
    got = admin.graphql(
        f"{{ userFeatures(uid: {uid}) {{ uid spend7d txns1h country isHeavySpender }} }}"
    )
    assert "errors" not in got, got
    want = mock.query(["UserFeatures.uid"], ["UserFeatures"],
                      pd.DataFrame({"UserFeatures.uid": [uid]}))  # fmt: skip
    row = got["data"]["userFeatures"]
    assert row["uid"] == uid
    assert round(row["spend7d"], 6) == round(float(want["UserFeatures.spend_7d"].iloc[0]), 6)
    assert row["txns1h"] == int(want["UserFeatures.txns_1h"].iloc[0])
    assert row["country"] == want["UserFeatures.country"].iloc[0]
    # the generic field, many rows at once, equals REST
    rows, ts = _rows(ev, at)
    gen = admin.graphql("query($d: JSON!, $t: [String!]) { query(inputs: [\"UserFeatures.uid\"], "
                        "outputs: [\"UserFeatures\"], data: $d, timestamps: $t) }",
                        {"d": {"UserFeatures.uid": rows["UserFeatures.uid"].tolist()},
                         "t": [at.isoformat()] * len(rows)})  # fmt: skip
    rest = admin.query(["UserFeatures.uid"], ["UserFeatures"], rows[["UserFeatures.uid"]], ts)
    assert gen["data"]["query"]["UserFeatures.txns_1h"] == rest["UserFeatures.txns_1h"].tolist()


def test_lookup_through_the_server_equals_the_mock(loaded) -> None:  # type: ignore[no-untyped-def]
    admin, mock, ev, at = loaded
    uids = pd.DataFrame({"uid": sorted(ev.transactions.uid.unique())})
    ts = pd.Series([at] * len(uids))
    got, found = admin.lookup("UserSpend", uids, timestamps=ts)
    want, want_found = mock.lookup("UserSpend", uids, ts)
    assert found.tolist() == want_found.tolist()
    for c in ["uid", "txns_1h", "txns_forever"]:
        assert got[c].tolist() == want[c].tolist(), c


def test_branches_through_the_server(loaded, serving: Serving) -> None:  # type: ignore[no-untyped-def]
    admin, _, _, _ = loaded
    admin.clone_branch("exp", from_branch="main")
    assert {"main", "exp"} <= set(admin.list_branches())
    exp = Client(
        serving.url, serving.token("exp-only", ("query",), branches=("exp",)), branch="exp"
    )
    assert exp.list_branches() == ["exp"]
    assert exp.explain(["UserFeatures.uid"], ["UserFeatures.country"])["steps"]
    admin.delete_branch("exp")
    assert "exp" not in admin.list_branches()


def test_server_and_engine_export_their_metrics(loaded, serving: Serving, engine) -> None:  # type: ignore[no-untyped-def]
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    def samples(url: str) -> dict[str, list]:  # type: ignore[type-arg]
        text = httpx.get(url, timeout=10).text
        out: dict[str, list] = {}  # type: ignore[type-arg]
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                out.setdefault(s.name, []).append(s)
        return out

    server = samples(f"{serving.url}/metrics")
    routes = {s.labels["route"] for s in server["fennel_query_server_request_seconds_count"]}
    assert {"query", "lookup", "graphql"} <= routes
    assert server["fennel_query_plan_seconds_count"]
    assert server["fennel_query_lookup_fanout_count"]
    eng = samples(f"http://{engine.address}/metrics")
    done = sum(s.value for s in eng["fennel_engine_messages_total"])
    assert done > 300  # every transaction went through at least one runner
    assert sum(s.value for s in eng["fennel_engine_batch_seconds_count"]) > 0
    assert "fennel_engine_lag_messages" in eng
    jobs = {s.labels["job"] for s in eng["fennel_engine_messages_total"]}
    assert any("UserSpend" in j for j in jobs)


def test_dagster_shows_what_the_servers_answered_on_the_featureset_assets(
    loaded, serving: Serving, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    import os

    from dagster import DagsterInstance, SensorResult, build_sensor_context

    from fennel_dagster.settings import get_settings
    from tests.engine.harness import wait_for

    admin, _, _, _ = loaded
    for uid in (1, 2, 3):
        admin.graphql(f"{{ userFeatures(uid: {uid}) {{ country }} }}")
    for k, v in serving.settings.as_env().items():
        monkeypatch.setitem(os.environ, k, v)
    get_settings.cache_clear()
    try:
        from resources import MetadataStore
        from sensors.health import query_health

        def observed() -> SensorResult | None:
            with DagsterInstance.ephemeral() as instance:
                ctx = build_sensor_context(
                    instance=instance, resources={"metadata": MetadataStore()}
                )
                result = query_health(ctx)
            return result if isinstance(result, SensorResult) else None

        wait_for(lambda: observed() is not None, 30, "the server's stats published")
        result = observed()
        assert result is not None
        user = next(e for e in result.asset_events or [] if e.asset_key.path[-1] == "UserFeatures")
        assert user.metadata["requests (last minute)"].value >= 3
        assert user.metadata["p99 ms (worst server)"].value > 0
    finally:
        get_settings.cache_clear()


def test_graphql_persisted_queries(loaded, serving: Serving) -> None:  # type: ignore[no-untyped-def]
    """Apollo's automatic persisted queries: a hash alone once the server has the document."""
    import hashlib

    import httpx

    _, _, ev, _ = loaded
    uid = int(ev.transactions.uid.iloc[0])
    doc = "query Q($uid: Int64!) { userFeatures(uid: $uid) { uid txns1h country } }"
    digest = hashlib.sha256(doc.encode()).hexdigest()
    ext = {"persistedQuery": {"version": 1, "sha256Hash": digest}}
    headers = {"Authorization": f"Bearer {serving.token('apq')}"}
    with httpx.Client(base_url=serving.url, headers=headers, timeout=30) as http:

        def post(body: dict) -> httpx.Response:
            return http.post("/graphql", json={"variables": {"uid": uid}, **body})

        unknown = post({"extensions": ext})
        assert unknown.status_code == 200
        assert unknown.json()["errors"][0]["extensions"]["code"] == "PERSISTED_QUERY_NOT_FOUND"
        wrong = post({"query": doc + " ", "extensions": ext})
        assert wrong.status_code == 400 and "sha256Hash" in wrong.json()["error"]
        old = post({"extensions": {"persistedQuery": {"version": 2, "sha256Hash": digest}}})
        assert old.status_code == 400 and "version" in old.json()["error"]
        plain = post({"query": doc})
        first = post({"query": doc, "extensions": ext})
        by_hash = post({"extensions": ext})
        for op in ("Q", None, "Nope"):  # compiled or not, named or not: one answer, or a 400
            named = post({"query": doc, "operationName": op})
            assert named.status_code == (400 if op == "Nope" else 200), named.text
            assert "operationName" in named.text if op == "Nope" else named.json() == plain.json()
    assert plain.status_code == first.status_code == by_hash.status_code == 200
    assert by_hash.json() == first.json() == plain.json()
    assert by_hash.json()["data"]["userFeatures"]["uid"] == uid


def test_several_worker_processes_answer_alike_and_export_one_set_of_metrics(  # type: ignore[no-untyped-def]
    loaded, serving: Serving, tmp_path
) -> None:
    """``serve --workers 2``: both processes answer as the one-process server does, and any
    worker's /metrics counts every worker's requests."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    from tests.serve.conftest import start_server

    _, _, ev, _ = loaded
    body = {"inputs": ["UserFeatures.uid"], "outputs": ["UserFeatures.txns_1h", "UserFeatures.country"],
            "data": {"UserFeatures.uid": [int(u) for u in ev.transactions.uid.head(5)]}}  # fmt: skip
    headers = {"Authorization": f"Bearer {serving.token('workers')}"}
    want = httpx.post(f"{serving.url}/api/v1/query", json=body, headers=headers, timeout=30)
    assert want.status_code == 200
    two = start_server(serving.settings, tmp_path / "workers.log", "--workers", "2")
    try:
        servers, sent = set(), 0
        while len(servers) < 2 or sent < 20:
            assert sent < 400, f"only {servers} answered {sent} requests: the workers share no port"
            with httpx.Client(headers=headers, timeout=30) as http:  # a new connection each time
                got = http.post(f"{two.url}/api/v1/query", json=body)
            sent += 1
            assert got.status_code == 200 and got.json() == want.json()
            servers.add(got.headers["x-fennel-server"])
        text = httpx.get(f"{two.url}/metrics", timeout=10).text
        counted = sum(
            s.value for fam in text_string_to_metric_families(text) for s in fam.samples
            if s.name == "fennel_query_server_request_seconds_count"
            and s.labels.get("route") == "query" and s.labels.get("status") == "200"
        )  # fmt: skip
        assert counted == sent
    finally:
        two.process.terminate()
        two.process.wait(30)


def _fanout(url: str) -> tuple[float, float]:
    """The server's lookup fan-out histogram: (queries, engine requests)."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    got = {s.name: s.value for fam in text_string_to_metric_families(
        httpx.get(f"{url}/metrics", timeout=10).text) for s in fam.samples
        if s.name.startswith("fennel_query_lookup_fanout_")}  # fmt: skip
    return got["fennel_query_lookup_fanout_count"], got["fennel_query_lookup_fanout_sum"]


def test_a_querys_lookups_reach_their_engine_in_one_request(loaded, serving: Serving) -> None:  # type: ignore[no-untyped-def]
    """Lookups of two datasets (UserSpend, User) over every partition, all served by one
    engine: one HTTP request (``POST /lookups``), and the answers equal the mock's."""
    admin, mock, ev, at = loaded
    rows, ts = _rows(ev, at)
    outputs = ["UserFeatures.spend_7d", "UserFeatures.txns_1h", "UserFeatures.country"]
    keys = rows[["UserFeatures.uid"]].drop_duplicates().reset_index(drop=True)
    ts = ts.iloc[: len(keys)].reset_index(drop=True)
    asked = serving.settings.partitions * 2  # (dataset, partition) pairs the keys may hit
    assert asked >= 2
    before = _fanout(serving.url)
    got = admin.query(["UserFeatures.uid"], outputs, keys, ts)
    after = _fanout(serving.url)
    _same(got, mock.query(["UserFeatures.uid"], outputs, keys, ts))
    assert after[0] - before[0] == 1  # this query
    assert after[1] - before[1] == 1  # one request to the one engine


def test_an_engine_answers_each_lookup_of_a_batch_on_its_own(
    loaded, serving: Serving, engine
) -> None:  # type: ignore[no-untyped-def]
    """``POST /lookups``: every request answered with its own status (a partition this engine
    does not own is a 409 beside the others' rows), and only with the service credential."""
    import httpx
    import orjson

    from fennel_dagster.engine import lookups
    from fennel_dagster.engine.lookup_client import SERVICE_HEADER
    from fennel_dagster.metadata import registry, tokens
    from fennel_dagster.metadata.db import connect

    admin, mock, ev, at = loaded
    s = serving.settings
    with connect(s, s.pg_schema, autocommit=True) as conn:
        secret = tokens.service_secret(conn)
        job = lookups.serving_job(registry.branch_jobs(conn, "main"), "UserSpend")
    uid = int(ev.transactions.uid.iloc[0])
    part = lookups.partitions_of_records(job, [{"uid": uid}])[0]
    micros = int(pd.Timestamp(at).value // 1000)
    good = {"job": job.hash, "partition": part, "keys": [{"uid": uid}], "micros": [micros],
            "fields": ["txns_forever"]}  # fmt: skip
    stray = {**good, "job": "0" * len(job.hash)}
    url = f"http://{engine.address}/lookups"
    body = orjson.dumps({"lookups": [good, stray]})
    r = httpx.post(url, content=body, headers={SERVICE_HEADER: secret}, timeout=10)
    assert r.status_code == 200, r.text
    first, second = r.json()["answers"]
    want, found = mock.lookup("UserSpend", pd.DataFrame({"uid": [uid]}), pd.Series([at]))
    assert first["status"] == 200 and first["found"] == [bool(found.iloc[0])]
    assert first["rows"][0]["txns_forever"] == int(want["txns_forever"].iloc[0])
    assert second["status"] == 409 and "does not own" in second["error"]
    assert httpx.post(url, content=body, timeout=10).status_code == 401


def test_errors_over_http_are_the_mocks_class_words_and_hint(loaded, serving: Serving) -> None:  # type: ignore[no-untyped-def]
    """A refusal through the query server is raised by ``Client`` as the class the mock
    raises (a ``ServerError`` too, with the status), with the mock's text (Fennel's words)."""
    admin, _, _, _ = loaded
    mock = MockClient()
    mock.commit("payments", datasets=DATASETS, featuresets=FEATURESETS)
    keys = pd.DataFrame({"uid": [1]})
    refusals = [
        lambda c: c.init_branch("main"),
        lambda c: c.clone_branch("main", from_branch="main"),
        lambda c: c.clone_branch("x", from_branch="gone"),
        lambda c: c.delete_branch("main"),
        lambda c: c.delete_branch("gone"),
        lambda c: c.lookup("Nope", keys),
        lambda c: c.query(["UserFeatures.uid"], ["UserFeatures.country"], pd.DataFrame({"x": [1]})),
        # a non-incremental commit leaving out every dataset the extractors read
        lambda c: c.commit("bad", datasets=[], featuresets=FEATURESETS),
    ]
    for call in refusals:
        with pytest.raises(FennelError) as by_mock:
            call(mock)
        with pytest.raises(FennelError) as over_http:
            call(admin)
        got, want = over_http.value, by_mock.value
        assert isinstance(got, type(want)), (type(got).__mro__, type(want))
        assert str(got) == str(want) and bool(got.hint) == bool(want.hint), (got, want)
        if isinstance(got, ServerError):  # raised by the server (the input check is the client's)
            assert got.status in (400, 404)
    with pytest.raises(BranchNotSynced) as missing:
        Client(serving.url, serving.token("any"), branch="gone").lookup("User", keys)
    assert str(missing.value) == (
        '"Branch: `gone` not found, please sync this branch and try again. Available '
        f'branches: {sorted(admin.list_branches())}"'
    )
    assert missing.value.status == 404 and "init=True" in str(missing.value.hint)
