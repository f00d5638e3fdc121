"""Every validation rule, with the exact error it reports (entity, field or operator, fix)."""

from __future__ import annotations

import dataclasses
from datetime import datetime

import pytest

from examples.payments import DATASETS, FEATURESETS
from fennel_dagster import (
    commit_spec,
    dataset,
    extractor,
    feature,
    featureset,
    field,
    inputs,
    meta,
    outputs,
    pipeline,
    source,
)
from fennel_dagster.aggregate import Count, Sum
from fennel_dagster.commit.compiler import compile_blueprints, jobs_of
from fennel_dagster.commit.errors import CommitRejected, Violation
from fennel_dagster.commit.graph import EntityGraph
from fennel_dagster.commit.validate import validate, validate_or_raise
from fennel_dagster.expr import col
from fennel_dagster.sources import Webhook
from fennel_dagster.window import Continuous, Tumbling
from fennel_dagster.wire import plan, spec
from tests.deferred import checked_at_commit

hook = Webhook(name="hook")
OWNER = "team@example.com"


def messages(commit: spec.CommitSpec, previous: spec.CommitSpec | None = None) -> list[str]:
    return [str(e) for e in validate(commit, previous)]


@meta(owner=OWNER)
@source(hook.endpoint("txn"), cdc="append")
@dataset
class Txn:
    uid: int
    amount: float
    ts: datetime


def users_dataset(deleted: bool = False):
    @meta(owner=OWNER, deleted=deleted)
    @source(hook.endpoint("users"), cdc="upsert")
    @dataset(index=True)
    class Users:
        uid: int = field(key=True)
        age: int
        ts: datetime

    return Users


Users = users_dataset()


def spend_dataset(version: int = 1, window: str = "7d", extra_field: bool = False):
    @meta(owner=OWNER)
    @dataset(index=True, version=version)
    class Spend:
        uid: int = field(key=True)
        total: float
        ts: datetime

        @pipeline
        @inputs(Txn)
        def agg(cls, txn):
            return txn.groupby("uid").aggregate(total=Sum(of="amount", window=Continuous(window)))

    return Spend


def test_the_example_repo_is_valid() -> None:
    assert messages(commit_spec("v1", DATASETS, FEATURESETS)) == []


def test_owner_is_required() -> None:
    @source(hook.endpoint("x"))
    @dataset
    class Orphan:
        uid: int
        ts: datetime

    assert messages(commit_spec("m", [Orphan])) == [
        "Orphan: has no owner: add @meta(owner='team@example.com') above @dataset"
    ]


def test_source_and_pipeline_are_exclusive_and_one_is_needed() -> None:
    @meta(owner=OWNER)
    @source(hook.endpoint("both"))
    @dataset
    class Both:
        uid: int
        amount: float
        ts: datetime

        @pipeline
        @inputs(Txn)
        def p(cls, txn):
            return txn

    @meta(owner=OWNER)
    @dataset
    class Neither:
        uid: int
        ts: datetime

    # neither is Fennel's rule too: an empty dataset until something writes to it
    assert messages(commit_spec("m", [Txn, Both, Neither])) == [
        "Both: has both a @source and a @pipeline: a dataset gets rows from sources or from pipelines, not both: split it in two",
    ]
    assert messages(commit_spec("m", [Txn, Neither])) == []
    jobs = jobs_of(compile_blueprints(EntityGraph.build(commit_spec("m", [Txn, Neither]))))
    writers = (plan.SourceJobSpec, plan.PipelineJobSpec)
    assert not [j for j in jobs if j.dataset.name == "Neither" and isinstance(j, writers)]


def test_cdc_must_match_keys() -> None:
    @meta(owner=OWNER)
    @source(hook.endpoint("a"), cdc="upsert")
    @dataset
    class NoKeys:
        uid: int
        ts: datetime

    @meta(owner=OWNER)
    @source(hook.endpoint("b"), cdc="append")
    @dataset
    class Keyed:
        uid: int = field(key=True)
        ts: datetime

    assert messages(commit_spec("m", [NoKeys, Keyed])) == [
        "Keyed (@source webhook hook): cdc='append' on a keyed dataset: use cdc='upsert' (rows replace earlier rows of the same key)",
        "NoKeys (@source webhook hook): cdc='upsert' needs key fields: declare the key with field(key=True), or use cdc='append'",
    ]


def test_timestamp_and_key_rules_hold_on_the_ir() -> None:
    good = spec.DatasetSpec(
        "Raw", 1, (spec.FieldSpec("k", spec.OptionalType(spec.IntType()), key=True), spec.FieldSpec("ts", spec.TimestampType())),
        meta=spec.MetaSpec(owner=OWNER), sources=(dataclasses.replace(Txn.spec().sources[0], cdc="upsert"),),
    )  # fmt: skip
    assert messages(spec.CommitSpec("m", (good,), ())) == [
        "Raw: has 0 timestamp fields: mark exactly one datetime field with field(timestamp=True)",
        "Raw (k): key field is Optional: keys cannot be null: drop Optional",
    ]


@checked_at_commit
def test_inferred_schema_must_equal_the_declared_one() -> None:
    @meta(owner=OWNER)
    @dataset(index=True)
    class WrongSpend:
        uid: int = field(key=True)
        total: int
        count: int
        ts: datetime

        @pipeline
        @inputs(Txn)
        def agg(cls, txn):
            return txn.groupby("uid").aggregate(total=Sum(of="amount", window=Continuous("1d")))

    assert messages(commit_spec("m", [Txn, WrongSpend])) == [
        "WrongSpend.agg (count): the pipeline does not produce field 'count' of WrongSpend: add it in the pipeline (assign) or remove it from WrongSpend",
        "WrongSpend.agg (total): WrongSpend.total is declared int but the pipeline produces float: declare `total: float` or cast it in the pipeline",
    ]


@checked_at_commit
def test_unknown_column_in_an_operator_is_pinned_to_the_node() -> None:
    @meta(owner=OWNER)
    @dataset
    class Filtered:
        uid: int
        amount: float
        ts: datetime

        @pipeline
        @inputs(Txn)
        def p(cls, txn):
            return txn.filter(col("amount_eur") > 0)

    assert messages(commit_spec("m", [Txn, Filtered])) == [
        "Filtered.p (filter n1): column 'amount_eur' does not exist (columns: uid, amount, ts): fix the expression or the columns it reads"
    ]


@checked_at_commit
def test_join_keys_must_be_the_right_sides_keys_with_matching_types() -> None:
    @meta(owner=OWNER)
    @dataset
    class Joined:
        uid: int
        amount: float
        age: int | None
        ts: datetime

        @pipeline
        @inputs(Txn, Users)
        def p(cls, txn, users):
            return txn.join(users, how="left", left_on=["amount"], right_on=["uid"])

    assert messages(commit_spec("m", [Txn, Users, Joined])) == [
        "Joined.p (join n2): join column 'amount' is float but Users.uid is int: cast it with assign(amount=col('amount').astype(...))"
    ]

    @meta(owner=OWNER)
    @dataset
    class JoinedWrongKey:
        uid: int
        amount: float
        ts: datetime

        @pipeline
        @inputs(Txn, Users)
        def p(cls, txn, users):
            return txn.join(users, how="left", left_on=["uid"], right_on=["age"])

    assert messages(commit_spec("m", [Txn, Users, JoinedWrongKey])) == [
        "JoinedWrongKey.p (join n2): join on ['age'] but Users is keyed by ['uid']: join on exactly Users's keys: on=['uid'] (or left_on=/right_on=)"
    ]


@checked_at_commit
def test_continuous_aggregates_cannot_feed_another_pipeline() -> None:
    Spend = spend_dataset()

    @meta(owner=OWNER)
    @dataset
    class Downstream:
        uid: int
        total: float
        ts: datetime

        @pipeline
        @inputs(Spend)
        def p(cls, spend):
            return spend

    errs = messages(commit_spec("m", [Txn, Spend, Downstream]))
    assert errs[-1] == (
        "Downstream.p (input Spend): Spend is a continuous-window aggregate, which cannot feed another pipeline: "
        "look Spend up from an extractor, or aggregate with a Tumbling/Hopping window instead"
    )


@checked_at_commit
def test_window_rules_reject_mixed_kinds_and_final_continuous() -> None:
    @meta(owner=OWNER)
    @dataset(index=True)
    class Mixed:
        uid: int = field(key=True)
        n: int
        m: int
        ts: datetime

        @pipeline
        @inputs(Txn)
        def p(cls, txn):
            return txn.groupby("uid").aggregate(
                n=Count(window=Continuous("1d")), m=Count(window=Tumbling("1h")), emit="final"
            )

    assert messages(commit_spec("m", [Txn, Mixed])) == [
        "Mixed.p (aggregate n1): mixes continuous and tumbling/hopping/session windows: split the aggregate into two pipelines, one per window kind",
        "Mixed.p (n): emit='final' with a continuous window: continuous windows never close: use emit='eager', or a Tumbling window",
    ]


def test_extractor_graph_is_acyclic_and_lookups_are_declared() -> None:
    @meta(owner=OWNER)
    @featureset
    class Risky:
        uid: int
        a: int
        b: int

        @extractor(deps=[])
        @inputs("b")
        @outputs("a")
        def make_a(cls, ts, b):
            return Users.lookup(ts, uid=b)

        @extractor
        @inputs("a")
        @outputs("b")
        def make_b(cls, ts, a):
            return a

    assert messages(commit_spec("m", [Txn, Users], [Risky])) == [
        "Risky.make_a (Users): looks up Users without declaring it: add it: @extractor(deps=[Users, ...])",
        "Risky.make_a (Risky.a): extractors form a cycle: Risky.a -> Risky.b -> Risky.a: break the cycle: one of these features must be an input, not computed from the others",
    ]


def test_one_extractor_per_feature() -> None:
    @meta(owner=OWNER)
    @featureset
    class Dup:
        uid: int
        a: int

        @extractor
        @inputs("uid")
        @outputs("a")
        def first(cls, ts, uid):
            return uid

        @extractor
        @inputs("uid")
        @outputs("a")
        def second(cls, ts, uid):
            return uid

    assert messages(commit_spec("m", [], [Dup])) == [
        "Dup.second (a): feature Dup.a is also computed by Dup.first: keep one extractor per feature: remove it from one @outputs"
    ]


def test_extractor_deps_must_be_in_the_commit() -> None:
    Spend = spend_dataset()

    @meta(owner=OWNER)
    @featureset
    class F:
        uid: int
        total: float = feature(Spend.total, default=0.0)

    assert messages(commit_spec("m", [Txn], [F])) == [
        "F._auto_total (Spend): depends on dataset Spend, which is not in the commit: add Spend to the commit"
    ]


def fennel_words(commit: spec.CommitSpec, previous: spec.CommitSpec | None = None) -> str:
    """What ``str(CommitRejected)`` says: Fennel's words of the first violation with them."""
    with pytest.raises(CommitRejected) as e:
        validate_or_raise(commit, previous)
    assert e.value.hint and all(str(v) in e.value.hint for v in e.value.errors)  # ours, all
    return str(e.value)


def test_rejections_say_fennels_words_and_keep_ours_in_the_hint() -> None:
    Spend = spend_dataset()

    @meta(owner=OWNER)
    @featureset
    class F:
        uid: int
        total: float = feature(Spend.total, default=0.0)

    assert fennel_words(commit_spec("m", [Txn], [F])) == "Dataset `Spend` not found in sync call"
    v1 = commit_spec("v1", [Txn, spend_dataset(1, "7d")])
    v2 = commit_spec("v2", [Txn, spend_dataset(1, "30d")])
    assert fennel_words(v2, v1) == "Please update version of dataset: `Spend`"
    ours = CommitRejected([Violation("A", "", "is wrong", "fix it")])  # no Fennel words:
    assert str(ours) == "commit rejected with 1 error(s):\n  - A: is wrong: fix it"  # ours
    assert ours.hint is None


def test_a_pipeline_input_outside_the_commit_is_refused() -> None:
    Spend = spend_dataset()
    assert messages(commit_spec("m", [Spend])) == [
        "Spend.agg (input Txn): reads dataset Txn, which is not in the commit: add Txn to the commit"
    ]
    assert fennel_words(commit_spec("m", [Spend])) == (
        "Dataset `Txn` is an input to the pipelines: `['Spend.agg']` but is not synced. "
        "Please add it to the sync call."
    )
    base = commit_spec("v1", [Txn, Spend])  # incremental: the branch's datasets count
    assert messages(commit_spec("m", [spend_dataset()], incremental=True), base) == []


def test_an_incremental_commit_keeps_every_feature_of_a_featureset() -> None:
    @meta(owner=OWNER)
    @featureset
    class G:
        uid: int
        a: int
        b: int

    before = commit_spec("v1", [], [G])

    @meta(owner=OWNER)  # type: ignore[no-redef]
    @featureset
    class G:
        uid: int
        a: int

    fewer = commit_spec("v2", [], [G], incremental=True)
    assert messages(fewer, before) == [
        "G (b): the incremental commit removes feature(s) b: keep every feature of G, or "
        "commit the whole graph without incremental=True"
    ]
    assert fennel_words(fewer, before) == (
        "Featureset G is not a superset of the existing featureset"
    )
    assert messages(dataclasses.replace(fewer, incremental=False), before) == []


def test_changed_pipeline_without_version_bump_is_rejected_naming_downstream() -> None:
    v1 = commit_spec("v1", [Txn, spend_dataset(1, "7d")])
    v2 = commit_spec("v2", [Txn, spend_dataset(1, "30d")])
    assert messages(v2, v1) == [
        "Spend (pipeline Spend.agg): pipeline Spend.agg changed but Spend.version is still 1: bump it to 2"
    ]
    assert messages(commit_spec("v2", [Txn, spend_dataset(2, "30d")]), v1) == []


def test_version_bump_must_propagate_downstream() -> None:
    @meta(owner=OWNER)
    @dataset
    class Big:
        uid: int
        amount: float
        ts: datetime

        @pipeline
        @inputs(Txn)
        def p(cls, txn):
            return txn.filter(col("amount") > 100)

    def counted(version: int):
        @meta(owner=OWNER)
        @dataset(index=True, version=version)
        class BigCount:
            uid: int = field(key=True)
            n: int
            ts: datetime

            @pipeline
            @inputs(Big)
            def p(cls, big):
                return big.groupby("uid").aggregate(n=Count(window=Continuous("1d")))

        return BigCount

    v1 = commit_spec("v1", [Txn, Big, counted(1)])

    @meta(owner=OWNER)
    @dataset(version=2)
    class Big:  # noqa: F811 - the same dataset, next version
        uid: int
        amount: float
        ts: datetime

        @pipeline
        @inputs(Txn)
        def p(cls, txn):
            return txn.filter(col("amount") > 200)

    assert messages(commit_spec("v2", [Txn, Big, counted(1)]), v1) == [
        "BigCount (version): its input Big got a new version but BigCount.version is still 1: bump BigCount to 2 so it is recomputed from Big's new version"
    ]
    assert messages(commit_spec("v2", [Txn, Big, counted(2)]), v1) == []


def test_version_cannot_go_down() -> None:
    v3 = commit_spec("v3", [Txn, spend_dataset(3)])
    assert messages(commit_spec("v4", [Txn, spend_dataset(2)]), v3) == [
        "Spend (version): version went down from 3 to 2: versions only grow: use 4"
    ]


def test_deletion_takes_two_commits() -> None:
    v1 = commit_spec("v1", [Txn, Users])
    assert messages(commit_spec("v2", [Txn]), v1) == [
        "Users: was removed from the commit without being marked deleted: delete in two commits: first commit Users with @meta(deleted=True), then omit it"
    ]

    v2 = commit_spec("v2", [Txn, users_dataset(deleted=True)])
    assert messages(v2, v1) == []
    assert messages(commit_spec("v3", [Txn]), v2) == []


def test_all_errors_are_reported_at_once() -> None:
    @source(hook.endpoint("both"))
    @dataset
    class NoOwnerBoth:
        uid: int = field(key=True)
        ts: datetime

        @pipeline
        @inputs(Users)
        def p(cls, users):  # type: ignore[no-untyped-def]
            return users.drop("age")

    with pytest.raises(CommitRejected) as e:
        validate_or_raise(commit_spec("m", [Users, NoOwnerBoth]))
    assert len(e.value.errors) == 3  # no owner; a source and a pipeline; append on keys
    assert str(e.value).startswith(
        "commit rejected with 3 error(s):\n  - NoOwnerBoth: has no owner"
    )


@checked_at_commit
def test_optional_join_column_must_be_dropnulled_first() -> None:
    @meta(owner=OWNER)
    @source(hook.endpoint("visits"))
    @dataset
    class Visits:
        uid: int | None
        ts: datetime

    @meta(owner=OWNER)
    @dataset
    class VisitAges:
        uid: int | None
        age: int | None
        ts: datetime

        @pipeline
        @inputs(Visits, Users)
        def p(cls, visits, users):
            return visits.join(users, how="left", on=["uid"])

    assert messages(commit_spec("m", [Visits, Users, VisitAges])) == [
        "VisitAges.p (join n2): join column 'uid' is Optional: dropnull('uid') before the join"
    ]
