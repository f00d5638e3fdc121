"""The compiled plan: typed job specs, round-tripped by the codec, and what the engine builds.

Also the shapes and connectors refused at commit (with their exact messages), the dropped
repartition hop, the single serving job per looked-up dataset, and ``env=``/``backfill=``
behaving the same in the definition server and the mock.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime

import pandas as pd
import pytest

from examples.payments import DATASETS, FEATURESETS
from fennel_dagster import commit_spec, dataset, field, inputs, meta, pipeline, source
from fennel_dagster.aggregate import Count, Sum
from fennel_dagster.commit.compiler import compile_blueprints, jobs_of
from fennel_dagster.commit.errors import BackfillRefused, CommitRejected
from fennel_dagster.commit.graph import EntityGraph
from fennel_dagster.commit.server import DefinitionServer
from fennel_dagster.declare.sources import Connector
from fennel_dagster.engine.jobs.factory import build_job
from fennel_dagster.engine.jobs.index import IndexJob
from fennel_dagster.engine.jobs.pipeline import PipelineJob
from fennel_dagster.engine.jobs.source import SourceJob
from fennel_dagster.mock import MockClient
from fennel_dagster.sources import S3, Kafka, Postgres, Webhook
from fennel_dagster.window import Continuous
from fennel_dagster.wire import decode, encode, plan, spec
from tests.commit_protocol.scenario import GRAPHS
from tests.engine.repo import graph as engine_graph

OWNER = "plan@example.com"
hook = Webhook(name="hook")


def compiled(
    datasets: list[type], featuresets: list[type] | None = None
) -> tuple[plan.JobSpec, ...]:
    commit = commit_spec("plan", datasets, featuresets or [])
    return jobs_of(compile_blueprints(EntityGraph.build(commit)))


REPOS = {
    "examples/payments": lambda: compiled(DATASETS, FEATURESETS),
    "tests/engine/repo": lambda: compiled(engine_graph("events")),
    **{f"tests/commit_protocol/{k}": (lambda g=g: compiled(g())) for k, g in GRAPHS.items()},
}


@pytest.mark.parametrize("repo", sorted(REPOS))
def test_every_job_spec_round_trips_through_the_codec(repo: str) -> None:
    jobs = REPOS[repo]()
    assert jobs
    for job in jobs:
        assert isinstance(job, plan.JOB_SPECS)
        assert decode(encode(job)) == job


@pytest.mark.parametrize("repo", sorted(REPOS))
def test_the_engine_builds_every_job_from_its_typed_spec(repo: str) -> None:
    jobs = REPOS[repo]()
    kinds = {plan.SourceJobSpec: SourceJob, plan.PipelineJobSpec: PipelineJob,
             plan.IndexJobSpec: IndexJob}  # fmt: skip
    for job in jobs:
        if isinstance(job, plan.OfflineJobSpec | plan.S3IngestJobSpec):
            continue  # not stream jobs: the offline writer and the S3 poller run them
        logic = build_job(job, lambda topic: 3)
        assert isinstance(logic, kinds[type(job)]) and logic.name == job.name
        read = {t for t, _ in logic.input_partitions(0)}
        assert read <= set(plan.read_topics(job)), (job.name, read)


def test_each_looked_up_dataset_has_exactly_one_serving_job() -> None:
    jobs = compiled(DATASETS, FEATURESETS)
    served = [plan.serves_dataset(j) for j in jobs if plan.serves_dataset(j) is not None]
    assert len(served) == len(set(served))
    by_ds = {plan.serves_dataset(j): j for j in jobs if plan.serves_dataset(j)}
    # UserSpend ends in a continuous aggregate: its pipeline job serves it, no index is built
    assert isinstance(by_ds["UserSpend"], plan.PipelineJobSpec)
    assert not any(isinstance(j, plan.IndexJobSpec) and j.dataset.name == "UserSpend" for j in jobs)
    assert isinstance(by_ds["Merchant"], plan.IndexJobSpec)


def test_webhook_inboxes_are_named_in_the_plan() -> None:
    jobs = compiled(DATASETS, FEATURESETS)
    inboxes = {(j.webhook.webhook, j.webhook.endpoint): j.webhook.topic
               for j in jobs if isinstance(j, plan.SourceJobSpec) and j.webhook}  # fmt: skip
    assert set(inboxes) == {("ops_webhook", "merchants"), ("ops_webhook", "users")}
    for job in jobs:
        if isinstance(job, plan.SourceJobSpec) and job.webhook is not None:
            assert job.external_topic == job.webhook.topic


# --------------------------------------------------------------------------- repartition


def _keyed_input_graph() -> list[type]:
    @meta(owner=OWNER)
    @source(hook.endpoint("acct"), cdc="upsert")
    @dataset(index=True)
    class Account:
        uid: int = field(key=True)
        balance: float
        ts: datetime

    @meta(owner=OWNER)
    @dataset(index=True)
    class AccountStats:
        uid: int = field(key=True)
        updates: int
        ts: datetime

        @pipeline
        @inputs(Account)
        def stats(cls, acct):
            return acct.groupby("uid").aggregate(updates=Count(window=Continuous("forever")))

    @meta(owner=OWNER)
    @source(hook.endpoint("txn"))
    @dataset
    class Txn:
        uid: int
        amount: float
        ts: datetime

    @meta(owner=OWNER)
    @dataset(index=True)
    class Spend:
        uid: int = field(key=True)
        total: float
        ts: datetime

        @pipeline
        @inputs(Txn)
        def agg(cls, txn):
            return txn.groupby("uid").aggregate(total=Sum(of="amount", window=Continuous("1d")))

    return [Account, AccountStats, Txn, Spend]


def test_no_repartition_when_the_input_is_keyed_by_the_group_keys() -> None:
    jobs = {j.dataset.name: j for j in compiled(_keyed_input_graph())
            if isinstance(j, plan.PipelineJobSpec)}  # fmt: skip
    assert jobs["AccountStats"].repartition is None  # Account is keyed by uid already
    assert jobs["Spend"].repartition is not None  # Txn is keyless: rows spread by row hash
    assert jobs["Spend"].repartition.keys == ("uid",)
    commit = commit_spec("plan", _keyed_input_graph(), [])
    topics = [b for b in compile_blueprints(EntityGraph.build(commit)).of_kind("topic")
              if b.spec_dict()["role"] == "repartition"]  # fmt: skip
    assert [b.entity for b in topics] == ["Spend.agg"]


def test_mock_answers_the_unrepartitioned_aggregate_like_the_repartitioned_one() -> None:
    client = MockClient()
    client.commit("v1", _keyed_input_graph())
    t = pd.Timestamp("2026-01-01", tz="UTC")
    client.log("hook", "acct", pd.DataFrame({"uid": [1, 1, 2], "balance": [1.0, 2.0, 3.0],
                                             "ts": [t, t + pd.Timedelta("1h"), t]}))  # fmt: skip
    df, found = client.lookup("AccountStats", pd.DataFrame({"uid": [1, 2, 3]}),
                              pd.Series([t + pd.Timedelta("2h")] * 3))  # fmt: skip
    assert list(found) == [True, True, False]
    assert list(df["updates"][:2]) == [2, 1]


# --------------------------------------------------------------------------- refused at commit


def _rejected(datasets: list[type], mock: bool = False) -> list[str]:
    if mock:
        with pytest.raises(CommitRejected) as e:
            MockClient().commit("bad", datasets)
        return [str(x) for x in e.value.errors]
    result = DefinitionServer().process_spec(commit_spec("bad", datasets, []), None)
    return [str(x) for x in result.errors]


def _txn() -> type:
    @meta(owner=OWNER)
    @source(hook.endpoint("t"))
    @dataset
    class Txn:
        uid: int
        merchant: int
        amount: float
        ts: datetime

    return Txn


def test_a_second_grouping_by_other_keys_is_refused_with_its_fix() -> None:
    Txn = _txn()

    @meta(owner=OWNER)
    @dataset(index=True)
    class Latest:
        merchant: int = field(key=True)
        uid: int
        amount: float
        ts: datetime

        @pipeline
        @inputs(Txn)
        def twice(cls, txn):
            return txn.groupby("uid").latest().groupby("merchant").latest()

    expected = (
        "Latest.twice (operator n2): groups by ['merchant'] but the pipeline's first keyed "
        "operator n1 groups by ['uid']; one job partition holds one key's rows, so every keyed "
        "operator of a pipeline must use the same keys: write the first grouping to a dataset "
        "of its own and group it again in a second pipeline"
    )
    for mock in (False, True):
        errors = _rejected([Txn, Latest], mock=mock)
        assert expected in errors, errors


def _two_branches(small_first: bool) -> list[type]:
    Txn = _txn()

    @meta(owner=OWNER)
    @dataset(index=True)
    class Spend:
        uid: int = field(key=True)
        total: float
        ts: datetime

        @pipeline
        @inputs(Txn)
        def agg(cls, txn):
            if small_first:
                small = txn.filter(lambda df: df["amount"] <= 10)
                big = txn.filter(lambda df: df["amount"] > 10)
            else:
                big = txn.filter(lambda df: df["amount"] > 10)
                small = txn.filter(lambda df: df["amount"] <= 10)
            window = Continuous("1d")
            grouped = big.groupby("uid").aggregate(total=Sum(of="amount", window=window))
            return grouped.union(
                small.groupby("uid").aggregate(total=Sum(of="amount", window=window))
            )

    return [Txn, Spend]


def test_a_node_reading_from_before_the_repartition_is_refused_with_its_fix() -> None:
    assert _rejected(_two_branches(small_first=False)) == [
        "Spend.agg (operator n2): reads n0, which is before the repartition at n1 (the input "
        "of n3): read from n3 or a node after it instead"
    ]


def test_a_branch_beside_the_repartition_is_refused_with_its_fix() -> None:
    assert _rejected(_two_branches(small_first=True), mock=True) == [
        "Spend.agg (operator n1): runs beside the input of the keyed operator n3 (n2); the "
        "engine repartitions at that operator, so every node before it must feed it: move the "
        "branch after the keyed operator, or into a pipeline of its own"
    ]


def test_a_join_side_named_first_in_inputs_is_not_a_branch_beside_the_repartition() -> None:
    # Fennel's docs write `@inputs(User, Transaction)` and join Transaction to User: the
    # joined dataset is looked up, never streamed, so it runs beside nothing
    @meta(owner=OWNER)
    @source(hook.endpoint("u"), cdc="upsert", disorder="1d")
    @dataset(index=True)
    class Home:
        uid: int = field(key=True)
        city: str
        ts: datetime

    txn = _txn()

    @meta(owner=OWNER)
    @dataset(index=True)
    class CitySpend:
        city: str = field(key=True)
        total: float
        ts: datetime

        @pipeline
        @inputs(Home, txn)
        def by_city(cls, home, t):  # type: ignore[no-untyped-def]
            joined = t.join(home, how="inner", on=["uid"])
            return joined.groupby("city").aggregate(
                total=Sum(of="amount", window=Continuous("forever"))
            )

    assert _rejected([Home, txn, CitySpend]) == []
    (job,) = [j for j in compiled([Home, txn, CitySpend])
              if isinstance(j, plan.PipelineJobSpec)]  # fmt: skip
    assert [i.dataset.name for i in job.inputs] == ["Txn"]
    assert [i.dataset.name for i in job.lookups] == ["Home"]
    assert job.repartition is not None and job.repartition.keys == ("city",)
    client = MockClient()
    client.commit("by city", [Home, txn, CitySpend])
    t0 = datetime(2026, 1, 1)
    client.log("hook", "u", pd.DataFrame({"uid": [1, 2], "city": ["Oslo", "Rome"],
                                          "ts": [t0, t0]}))  # fmt: skip
    client.log("hook", "t", pd.DataFrame({"uid": [1, 2, 1, 3], "merchant": [0, 0, 0, 0],
                                          "amount": [1.0, 2.0, 4.0, 8.0],
                                          "ts": [t0, t0, t0, t0]}))  # fmt: skip
    found, _ = CitySpend.lookup(pd.Series([t0, t0]), city=pd.Series(["Oslo", "Rome"]))
    assert found["total"].tolist() == [5.0, 2.0]


def test_sources_the_platform_cannot_read_are_refused_at_commit() -> None:
    @meta(owner=OWNER)
    @source(Postgres(name="crm", db_name="crm").table("users", cursor="ts"), cdc="append")
    @dataset
    class Raw:
        uid: int
        ts: datetime

    assert _rejected([Raw]) == ["Raw (source postgres(crm)): names no host: give "
                                "Postgres(name='crm', host=...)"]  # fmt: skip
    # the mock reads no connector (rows are logged to it), so it accepts the same commit
    MockClient().commit("ok", [Raw])

    @meta(owner=OWNER)
    @source(Connector("bigquery", "wh", {"table": "t"}), cdc="append")
    @dataset
    class Warehouse:
        uid: int
        ts: datetime

    assert _rejected([Warehouse]) == [
        "Warehouse (source bigquery(wh)): the platform has no reader for bigquery sources yet (it "
        "reads Kafka topics, webhook endpoints, S3 prefixes and Postgres tables): feed the rows "
        "through a Kafka topic or a Webhook endpoint (Client.log), or select this source out "
        "with env="
    ]


def test_a_postgres_source_compiles_to_an_inbox_a_cursor_ledger_and_an_ingest_job() -> None:
    @meta(owner=OWNER)
    @source(Postgres(name="crm", host="db", db_name="crm").table("users", cursor="ts"),
            every="5s", cdc="upsert")  # fmt: skip
    @dataset
    class Users:
        uid: int = field(key=True)
        ts: datetime

    assert _rejected([Users]) == []
    jobs = compiled([Users], [])
    ingest = next(j for j in jobs if isinstance(j, plan.PostgresIngestJobSpec))
    src = next(j for j in jobs if isinstance(j, plan.SourceJobSpec))
    assert src.external_topic == ingest.inbox_topic and ".pginbox.Users." in ingest.inbox_topic
    assert ".pgledger.Users." in ingest.ledger_topic and ingest.partitions == 1


def test_an_s3_source_compiles_to_an_inbox_a_ledger_and_an_ingest_job() -> None:
    @meta(owner=OWNER)
    @source(S3(name="lake").bucket("b", prefix="p/", format="parquet"), cdc="append")
    @dataset
    class Raw:
        uid: int
        ts: datetime

    assert _rejected([Raw]) == []
    jobs = compiled([Raw], [])
    ingest = next(j for j in jobs if isinstance(j, plan.S3IngestJobSpec))
    src = next(j for j in jobs if isinstance(j, plan.SourceJobSpec))
    assert src.external_topic == ingest.inbox_topic  # the source job applies the rules
    assert ingest.partitions == 1 and ingest.error_topic == src.error_topic
    assert ".s3ledger." in ingest.ledger_topic


def test_a_kafka_source_without_a_topic_is_refused() -> None:
    """Declarations always name one; a commit sent as wire bytes may not."""

    @meta(owner=OWNER)
    @source(Kafka(name="bus").topic("t"), cdc="append")
    @dataset
    class Raw:
        uid: int
        ts: datetime

    commit = commit_spec("bad", [Raw], [])
    ds = commit.datasets[0]
    src = dataclasses.replace(ds.sources[0], connector=dataclasses.replace(
        ds.sources[0].connector, config=()))  # fmt: skip
    commit = dataclasses.replace(commit, datasets=(dataclasses.replace(ds, sources=(src,)),))
    errors = [str(e) for e in DefinitionServer().process_spec(commit, None).errors]
    assert errors == [
        "Raw (source kafka(bus)): names no topic: use bus.topic('<topic>') in @source"
    ]


# --------------------------------------------------------------------------- env= and backfill=


def _env_graph() -> list[type]:
    @meta(owner=OWNER)
    @source(hook.endpoint("prod"), env=["prod"])
    @source(hook.endpoint("dev"), env=["~prod"])
    @dataset
    class Events:
        uid: int
        ts: datetime

    return [Events]


def test_env_selects_the_same_sources_in_the_server_and_the_mock() -> None:
    for env, endpoint in (("prod", "prod"), ("dev", "dev")):
        result = DefinitionServer().process_spec(commit_spec("e", _env_graph(), [], env=env), None)
        assert result.errors == ()
        sources = result.commit.datasets[0].sources
        assert [dict(s.connector.config)["endpoint"] for s in sources] == [endpoint]
        mocked = MockClient().commit("e", _env_graph(), env=env).commit
        assert mocked.datasets[0].sources == sources
        jobs = jobs_of(result.blueprints)
        assert [j.webhook.endpoint for j in jobs
                if isinstance(j, plan.SourceJobSpec) and j.webhook] == [endpoint]  # fmt: skip


def test_backfill_false_refuses_only_a_commit_that_would_back_fill() -> None:
    Txn = _txn()

    def spend(window: str, version: int = 1) -> type:
        @meta(owner=OWNER)
        @dataset(index=True, version=version)
        class Spend:
            uid: int = field(key=True)
            total: float
            ts: datetime

            @pipeline
            @inputs(Txn)
            def agg(cls, txn):  # type: ignore[no-untyped-def]
                return txn.groupby("uid").aggregate(
                    total=Sum(of="amount", window=Continuous(window))
                )

        return Spend

    mock = MockClient()
    mock.commit("sources only", [Txn], backfill=False)  # no pipeline: nothing to back-fill
    with pytest.raises(BackfillRefused, match=r"backfill=False\) would back-fill Spend.agg"):
        mock.commit("new pipeline", [Txn, spend("1h")], backfill=False)
    mock.commit("new pipeline", [Txn, spend("1h")])
    mock.commit("same again", [Txn, spend("1h")], backfill=False)  # isomorphic: allowed
    with pytest.raises(BackfillRefused, match="a new dataset or a version bump"):
        mock.commit("version bump", [Txn, spend("2h", version=2)], backfill=False)


def test_a_new_pipeline_on_the_mock_processes_rows_logged_before_it() -> None:
    Txn = _txn()

    @meta(owner=OWNER)
    @dataset(index=True)
    class Spend:
        uid: int = field(key=True)
        total: float
        ts: datetime

        @pipeline
        @inputs(Txn)
        def agg(cls, txn):
            return txn.groupby("uid").aggregate(
                total=Sum(of="amount", window=Continuous("forever"))
            )

    client = MockClient()
    client.commit("v1", [Txn])
    t = pd.Timestamp("2026-01-01", tz="UTC")
    client.log("hook", "t", pd.DataFrame({"uid": [1, 1], "merchant": [5, 5],
                                          "amount": [2.0, 3.0], "ts": [t, t]}))  # fmt: skip
    client.commit("v2", [Txn, Spend])
    df, found = client.lookup(Spend, pd.DataFrame({"uid": [1]}), pd.Series([t]))
    assert bool(found[0]) and df["total"][0] == 5.0


def test_wire_types_are_plain_ir() -> None:
    job = compiled(engine_graph("events"))[0]
    assert isinstance(job.dataset, spec.DatasetSpec)
