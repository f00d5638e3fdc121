"""Ill-typed expressions are rejected at commit, naming the dataset, the operator and the
columns, instead of raising a raw TypeError on the first rows logged; well-typed mixes pass."""

from __future__ import annotations

from datetime import UTC, datetime

import pandas as pd
import pytest

from fennel_dagster import commit_spec, dataset, field, inputs, meta, pipeline, source
from fennel_dagster.commit.errors import CommitRejected
from fennel_dagster.commit.infer_types import TypeErrorInExpr, type_of
from fennel_dagster.commit.server import DefinitionServer
from fennel_dagster.commit.validate import validate
from fennel_dagster.declare.dtypes import render
from fennel_dagster.declare.errors import DeclarationError
from fennel_dagster.declare.semantics import deferred
from fennel_dagster.expr import Expr, col, lit, when
from fennel_dagster.mock import MockClient
from fennel_dagster.sources import Webhook
from fennel_dagster.wire import encode, spec

hook = Webhook(name="hook")
OWNER = "team@example.com"


@meta(owner=OWNER)
@source(hook.endpoint("events"), cdc="append")
@dataset
class Events:
    uid: int
    channel: str
    amount: float
    n: int | None
    flag: bool
    seen: datetime
    ts: datetime = field(timestamp=True)


# ill-typed on purpose: checked at commit only here, to test the commit's own rules
# (@dataset itself rejects them, as Fennel does: test_dataset_rejects_an_ill_typed_pipeline)
with deferred():

    @meta(owner=OWNER)
    @dataset
    class ByChannel:
        uid: int
        channel: str
        amount: float
        n: int | None
        flag: bool
        seen: datetime
        ts: datetime = field(timestamp=True)

        @pipeline
        @inputs(Events)
        def bar(cls, events):
            return events.filter(col("channel") > 5)

    @meta(owner=OWNER)
    @dataset
    class Labelled:
        uid: int
        label: str
        ts: datetime

        @pipeline
        @inputs(Events)
        def bar(cls, events):
            return events.assign(label=(col("channel") + 1).astype(str)).select("uid", "label")


@meta(owner=OWNER)
@source(hook.endpoint("clicks"), cdc="append", where=col("channel") > 5)
@dataset
class Clicks:
    uid: int
    channel: str
    ts: datetime


@meta(owner=OWNER)
@source(hook.endpoint("views"), cdc="append", where=(col("channel") == "web") & (col("uid") > 1.5))
@dataset
class Views:
    uid: int
    channel: str
    ts: datetime


@meta(owner=OWNER)
@dataset
class WellTyped:
    uid: int
    n1: int | None
    ts: datetime

    @pipeline
    @inputs(Events)
    def bar(cls, events):
        kept = events.filter(
            (col("uid") > 2.5)
            & (col("amount") <= col("uid"))
            & (col("channel") == "x")
            & (col("ts") >= col("seen"))
            & (col("ts") > lit(datetime(2024, 1, 1, tzinfo=UTC)))
            & ~col("n").isnull()
        )
        return kept.assign(n1=(col("n") + 1).astype(int | None)).select("uid", "n1")


FILTER_MESSAGE = (
    'ByChannel.bar (filter n1): col("channel") > 5 compares str with int: '
    "cast one side or compare like with like"
)


def test_dataset_rejects_an_ill_typed_pipeline() -> None:
    with pytest.raises(DeclarationError, match=r'col\("channel"\) > 5 compares str with int'):

        @meta(owner=OWNER)
        @dataset
        class Again:
            uid: int
            ts: datetime = field(timestamp=True)
            channel: str

            @pipeline
            @inputs(Events)
            def bar(cls, events):  # type: ignore[no-untyped-def]
                return events.filter(col("channel") > 5).drop("amount", "n", "flag", "seen")


def test_filter_comparing_text_with_a_number_is_rejected_by_the_mock_client() -> None:
    with pytest.raises(CommitRejected) as e:
        MockClient().commit("bad", [Events, ByChannel])
    assert [str(v) for v in e.value.errors] == [FILTER_MESSAGE]


def test_filter_comparing_text_with_a_number_is_rejected_by_the_definition_server() -> None:
    commit = commit_spec("bad", [Events, ByChannel])
    assert [str(v) for v in validate(commit)] == [FILTER_MESSAGE]
    result = DefinitionServer().process(encode(commit), None)
    assert [str(v) for v in result.errors] == [FILTER_MESSAGE]
    assert result.blueprints.blueprints == ()


def test_text_plus_number_in_assign_is_rejected() -> None:
    assert [str(v) for v in validate(commit_spec("bad", [Events, Labelled]))] == [
        'Labelled.bar (assign n1): col("channel") + 1 does arithmetic on str and int: '
        "arithmetic needs numbers: cast with .astype(int) or .astype(float) "
        "(join text with .str.concat())"
    ]


def test_source_where_comparing_text_with_a_number_is_rejected() -> None:
    assert [str(v) for v in validate(commit_spec("bad", [Clicks]))] == [
        'Clicks (@source webhook hook where): col("channel") > 5 compares str with int: '
        "cast one side or compare like with like"
    ]
    with pytest.raises(CommitRejected, match="compares str with int"):
        MockClient().commit("bad", [Clicks])


def test_well_typed_mixes_commit_and_run() -> None:
    assert validate(commit_spec("ok", [Events, WellTyped, Views])) == []
    client = MockClient()
    client.commit("ok", [Events, WellTyped, Views])
    t0 = pd.Timestamp("2025-01-01", tz="UTC")
    rows = pd.DataFrame(
        {
            "uid": [3, 3, 1],
            "channel": ["x", "x", "x"],
            "amount": [1.0, 1.0, 0.5],
            "n": [4, None, 2],
            "flag": [True, True, False],
            "seen": [t0, t0, t0],
            "ts": [t0, t0, t0],
        }
    )
    client.log(Events, rows)
    assert client.get_dataset_df(WellTyped)["n1"].tolist() == [5]
    client.log(Views, pd.DataFrame({"uid": [1, 2], "channel": ["web", "web"], "ts": [t0, t0]}))
    assert client.get_dataset_df(Views)["uid"].tolist() == [2]


SCHEMA: dict[str, spec.DType] = {
    "s": spec.StringType(),
    "name": spec.OptionalType(spec.StringType()),
    "i": spec.IntType(),
    "n": spec.OptionalType(spec.IntType()),
    "x": spec.FloatType(),
    "flag": spec.BoolType(),
    "ts": spec.TimestampType(),
    "l": spec.ListType(spec.IntType()),
    "p": spec.StructType("Point", (spec.StructField("a", spec.IntType()),)),
}


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        (col("name") + 1, 'col("name") + 1 does arithmetic on Optional[str] and int'),
        (col("flag") & col("x"), 'col("flag") & col("x") needs bools, got bool and float'),
        (~col("i"), '~col("i") needs bools, got int'),
        (col("ts") > 3, 'col("ts") > 3 compares datetime with int'),
        (col("ts") == "2024-01-01", 'col("ts") == "2024-01-01" compares datetime with str'),
        (col("flag") == 1, 'col("flag") == 1 compares bool with int'),
        (col("i").str.len(), 'col("i").str.len() needs a str, got int'),
        (col("s").dt.year, 'col("s").dt.year needs a datetime, got str'),
        (col("s").num.sqrt(), 'col("s").num.sqrt() needs a number, got str'),
        (col("s").str.contains(1), 'col("s").str.contains(1) needs a str argument, got int'),
        (col("i").list.len(), 'col("i").list.len() needs a list, got int'),
        (col("l").list.contains("a"), 'col("l").list.contains("a") looks for a str in a List[int]'),
        (col("p").struct.get("b"), 'col("p").struct.get("b") reads a field Point does not have'),
        (col("n").fillnull("none"), 'col("n").fillnull("none") fills Optional[int] with str'),
        (
            when(col("flag")).then("a").otherwise(1),
            'when(col("flag")).then("a").otherwise(1) gives str from "a" but int from 1',
        ),
        (when(col("i")).then(1), 'the when() condition col("i") is int, not bool'),
    ],
)
def test_ill_typed_expressions_name_the_columns_and_types(expr: Expr, message: str) -> None:
    with pytest.raises(TypeErrorInExpr) as e:
        type_of(expr.node, SCHEMA)
    assert str(e.value).startswith(message), str(e.value)


@pytest.mark.parametrize(
    ("expr", "dtype"),
    [
        (col("i") > col("x"), "bool"),
        (col("n") + 1, "Optional[int]"),
        (col("i") * 1.5, "float"),
        (col("s") == "x", "bool"),
        (col("name") == None, "Optional[bool]"),  # noqa: E711
        (col("ts") > col("ts"), "bool"),
        (col("ts") - col("ts"), "int"),
        ((col("flag") | (col("n") > 0)) & ~col("flag"), "Optional[bool]"),
        (col("n").fillnull(0.5), "int"),
        (col("l").list.contains(2) & col("p").struct.get("a").isnull(), "bool"),
        (when(col("i") > 0).then(1).otherwise(2.5), "int"),
        (when(col("flag")).then(None).otherwise("x"), "Optional[str]"),
    ],
)
def test_well_typed_mixes_are_accepted(expr: Expr, dtype: str) -> None:
    assert render(type_of(expr.node, SCHEMA)) == dtype
