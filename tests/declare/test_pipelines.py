"""Pipelines declare operator DAGs: each operator becomes the IR node it should."""

from __future__ import annotations

from datetime import datetime

import pytest

from fennel_dagster import DeclarationError, dataset, field, inputs, pipeline
from fennel_dagster.aggregate import Avg, Count, Distinct, LastK, Quantile, Sum
from fennel_dagster.declare import dataset_spec
from fennel_dagster.expr import col, lit, when
from fennel_dagster.window import Continuous, Hopping, Session, Tumbling
from fennel_dagster.wire import spec
from tests.deferred import checked_at_commit


@dataset
class Txn:
    uid: int
    amount: float
    merchant: str
    tags: list[str]
    ts: datetime


@dataset(index=True)
class Merchant:
    merchant: str = field(key=True)
    category: str
    ts: datetime


@checked_at_commit  # the DAG's shape is the point, not the declared fields
def test_operators_build_the_dag_with_deterministic_node_ids() -> None:
    @dataset
    class Out:
        uid: int
        amount: float
        big: bool
        category: str | None
        ts: datetime

        @pipeline
        @inputs(Txn, Merchant)
        def build(cls, txn, merchant):
            x = txn.filter(col("amount") > 0).assign(big=(col("amount") > 100).astype(bool))
            x = x.join(merchant, how="left", on=["merchant"]).drop("merchant", "tags")
            return x.dedup(by=["uid", "amount"])

    (p,) = dataset_spec(Out).pipelines
    assert [type(n).__name__ for n in p.nodes] == [
        "InputNode", "InputNode", "FilterNode", "AssignNode", "JoinNode", "DropNode", "DedupNode",
    ]  # fmt: skip
    assert [n.id for n in p.nodes] == [f"n{i}" for i in range(7)] and p.output == "n6"
    join = p.nodes[4]
    assert isinstance(join, spec.JoinNode)
    assert (join.right, join.how, join.left_on, join.right_on, join.within_before) == (
        "Merchant", "left", ("merchant",), ("merchant",), None,
    )  # fmt: skip
    assert p.inputs == ("Txn", "Merchant")


def test_aggregations_and_windows_map_to_agg_specs() -> None:
    @dataset
    class Agg:
        uid: int = field(key=True)
        n: int
        total: float
        ts: datetime

        @pipeline
        @inputs(Txn)
        def agg(cls, txn):
            return txn.groupby("uid").aggregate(
                Count(window=Continuous("1h"), into_field="n"),
                total=Sum(of="amount", window=Continuous("forever")),
            )

    node = dataset_spec(Agg).pipelines[0].nodes[-1]
    assert isinstance(node, spec.AggregateNode)
    assert node.aggs == (
        spec.AggSpec("count", "n", spec.WindowSpec("continuous", duration=3600)),
        spec.AggSpec("sum", "total", spec.WindowSpec("forever"), of="amount"),
    )
    assert dataset_spec(Agg).terminal


def test_window_kinds_carry_their_parameters() -> None:
    assert Tumbling("1h").to_ir() == spec.WindowSpec("tumbling", duration=3600, stride=3600)
    assert Hopping("1d", "1h").to_ir() == spec.WindowSpec("hopping", duration=86400, stride=3600)
    assert Session("30m").to_ir() == spec.WindowSpec("session", gap=1800)
    with pytest.raises(DeclarationError, match="the stride is longer than the window"):
        Hopping("1h", "2h")


def test_aggregation_parameters_are_kept() -> None:
    w = Continuous("7d")
    assert LastK(of="m", limit=3, dedup=True, window=w).to_ir("x", "") == spec.AggSpec(
        "lastk", "x", w.to_ir(), of="m", limit=3, dedup=True
    )
    assert Quantile(of="a", p=0.9, window=w, default=0.0).to_ir("q", "").p == 0.9
    assert Avg(of="a", window=w).to_ir("a", "").default == 0.0
    assert Distinct(of="m", window=w).to_ir("d", "").kind == "distinct"


def test_aggregation_without_window_or_of_says_what_to_add() -> None:
    with pytest.raises(
        DeclarationError, match=r"Sum\(\.\.\.\) for 'total' has no window; pass window=Continuous"
    ):
        Sum(of="amount").to_ir("total", "pipeline X.p (aggregate)")
    with pytest.raises(
        DeclarationError,
        match=r"Expect p value between 0 and 1, found 1.5: Quantile\(of='a'\) takes p within \[0, 1\]",
    ):
        Quantile(of="a", p=1.5, window=Continuous("1d"))


def test_assign_expression_without_astype_is_rejected() -> None:
    with pytest.raises(DeclarationError) as e:

        @dataset
        class Bad:
            uid: int
            double: float
            ts: datetime

            @pipeline
            @inputs(Txn)
            def p(cls, txn):
                return txn.assign(double=col("amount") * 2)

    assert (
        "pipeline Bad.p (assign): the expression for 'double' must end with .astype(<type>)"
        in str(e.value)
    )


def test_pipeline_arguments_must_match_inputs() -> None:
    with pytest.raises(DeclarationError, match=r"takes 2 input argument\(s\) but @inputs names 1"):

        @dataset
        class Bad2:
            uid: int
            ts: datetime

            @pipeline
            @inputs(Txn)
            def p(cls, txn, other):
                return txn


def test_expressions_are_trees_of_calls() -> None:
    e = when(col("a") > 5).then(lit("big")).otherwise("small")
    assert e.node == spec.When(
        ((spec.Call("gt", (spec.Col("a"), spec.Lit(5))), spec.Lit("big")),), spec.Lit("small")
    )
    assert (col("s").str.lower().str.len() + 1).node.fn == "add"
    assert col("t").dt.hour.node == spec.Call("dt.hour", (spec.Col("t"),))
    assert col("x").fillnull(0).astype(int).node.dtype == spec.IntType()
    with pytest.raises(DeclarationError, match="an expression has no truth value"):
        bool(col("a") > 1)


def test_dropping_a_key_or_timestamp_field_is_refused_in_fennels_words() -> None:
    @dataset(index=True)
    class Member:
        pk: str
        uid: str = field(key=True)
        email: str
        createdAt: datetime = field(timestamp=True)  # noqa: N815 - Fennel's test's name

    with pytest.raises(DeclarationError) as e:

        @dataset
        class Derived:
            pk: str
            uid: str = field(key=True)
            email: str
            createdAt: datetime = field(timestamp=True)  # noqa: N815

            @pipeline
            @inputs(Member)
            def p(cls, m):  # type: ignore[no-untyped-def]
                return m.drop(columns=["createdAt"])

    assert str(e.value) == (
        "Field `createdAt` is a key or timestamp field in schema of drop node input "
        "'[Dataset:Member]'. Value fields are: ['pk', 'email']"
    )
    assert "drops the key/timestamp field(s) ['createdAt']" in str(e.value.hint)

    with pytest.raises(DeclarationError) as e:  # after another operator: Fennel names it

        @dataset
        class Derived2:
            pk: str
            uid: str = field(key=True)
            email: str
            createdAt: datetime = field(timestamp=True)  # noqa: N815

            @pipeline
            @inputs(Member)
            def p(cls, m):  # type: ignore[no-untyped-def]
                return m.filter(lambda df: df["pk"] != "").drop(columns=["uid"])

    assert str(e.value) == (
        "Field `uid` is a key or timestamp field in schema of drop node input "
        "'[Pipeline:p]->filter node'. Value fields are: ['pk', 'email']"
    )
