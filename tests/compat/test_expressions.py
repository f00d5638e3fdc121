"""Fennel's expression functions on fennel_dagster: types (``Expr.typeof``), values
(``Expr.eval``, nulls as ``pd.NA``), build-time errors, and the MockClient pipeline path."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any, List, Optional  # noqa: UP035 - Fennel compares typeof with these

import pandas as pd
import pytest

from fennel_dagster import dataset, inputs, pipeline
from fennel_dagster.declare.errors import DeclarationError
from fennel_dagster.declare.expr import struct_zip
from fennel_dagster.dtypes import struct
from fennel_dagster.expr import (
    InvalidExprException,
    col,
    lit,
    make_struct,
    now,
    repeat,
    var,
    when,
)
from fennel_dagster.expr import datetime as dt_lit
from fennel_dagster.mock import MockClient
from fennel_dagster.sources import Webhook, source

__owner__ = "compat@example.com"

# ruff: noqa: UP006, UP045 - Fennel compares typeof with typing.List/Optional
T0 = datetime(2024, 1, 1, tzinfo=UTC)


def _eval(e: Any, schema: dict[str, Any], **columns: list[Any]) -> list[Any]:
    out: list[Any] = e.eval(pd.DataFrame(columns), schema=schema).tolist()
    return out


@struct
class Pair:
    a: int
    b: Optional[bool]


# --------------------------------------------------------------------------- num


def test_trigonometry_types_and_values() -> None:
    for fn in ("sin", "cos", "tan", "arcsin", "arccos", "arctan"):
        e = getattr(col("x").num, fn)()
        assert e.typeof(schema={"x": int}) is float
        assert e.typeof(schema={"x": Optional[float]}) == Optional[float]
        with pytest.raises(ValueError, match="needs a number"):
            e.typeof(schema={"x": str})
    got = _eval(col("x").num.sin(), {"x": Optional[float]}, x=[0.0, math.pi / 2, None])
    assert got[:2] == [0.0, pytest.approx(1.0)] and got[2] is pd.NA
    # outside [-1, 1] arcsin is NaN: a null, as in Fennel
    got = _eval(col("x").num.arcsin(), {"x": float}, x=[1.0, 2.0])
    assert got == [pytest.approx(math.pi / 2), pd.NA]


def test_log_with_a_base_and_pow() -> None:
    e = col("x").num.log(base=2.0)
    assert e.typeof(schema={"x": Optional[int]}) == Optional[float]
    assert _eval(e, {"x": float}, x=[8.0, 1.0, -1.0]) == [3.0, 0.0, pd.NA]
    for bad in (1, 0, -2.0, "e"):
        with pytest.raises(InvalidExprException, match="base must be a positive number"):
            col("x").num.log(base=bad)  # type: ignore[arg-type]
    p = col("x").num.pow(lit(2))
    assert p.typeof(schema={"x": int}) is int and p.typeof(schema={"x": float}) is float
    assert _eval(p, {"x": int}, x=[3, -2]) == [9, 4]
    with pytest.raises(ValueError, match="negative int power"):
        lit(2).num.pow(lit(-2)).typeof()
    with pytest.raises(ValueError, match="negative int power"):  # a column exponent, at run time
        _eval(lit(2).num.pow(col("p")), {"p": int}, p=[1, -1])
    assert _eval(lit(2).num.pow(lit(-1.0)), {"x": int}, x=[1]) == [0.5]


def test_round_gives_an_int_without_decimals() -> None:
    assert col("x").round().typeof(schema={"x": Optional[float]}) == Optional[int]
    assert col("x").num.round(2).typeof(schema={"x": int}) is float
    assert _eval(col("x").round(), {"x": Optional[float]}, x=[2.5, -1.6, None]) == [2, -2, pd.NA]
    assert _eval(col("x").round(1), {"x": float}, x=[1.26, -2.0]) == [1.3, -2.0]
    for bad in (-1, 1.5, True):
        with pytest.raises(InvalidExprException, match="decimals must be an int >= 0"):
            col("x").round(bad)  # type: ignore[arg-type]


def test_to_string_keeps_nulls_as_na() -> None:
    got = _eval(col("x").num.to_string(), {"x": Optional[int]}, x=pd.array([7, None], "Int64"))
    assert got == ["7", pd.NA]


# --------------------------------------------------------------------------- str.parse


def test_parse_types_values_and_errors() -> None:
    e = col("x").str.parse(List[int])
    assert e.typeof(schema={"x": Optional[str]}) == Optional[List[int]]
    with pytest.raises(ValueError, match="needs a str"):
        e.typeof(schema={"x": int})
    assert _eval(e, {"x": Optional[str]}, x=["[1, 2]", None]) == [[1, 2], pd.NA]
    assert _eval(col("x").str.parse(float), {"x": str}, x=["5", "1.5"]) == [5.0, 1.5]
    for text, tp in (("False", bool), ("hi", str), ("[1,", List[int]), ("1.5", int)):
        with pytest.raises(ValueError, match="str.parse"):
            _eval(lit(text).str.parse(tp), {"x": int}, x=[1])


def test_parse_into_a_struct_gives_the_struct_class() -> None:
    got = _eval(col("x").str.parse(List[Optional[Pair]]), {"x": str},
                x=['[{"a": 1, "b": true}, {"a": 2}, null]'])  # fmt: skip
    assert got == [[Pair(1, True), Pair(2, pd.NA), pd.NA]]  # type: ignore[arg-type]


# --------------------------------------------------------------------------- lists


def test_map_and_filter_bind_a_variable_not_a_column() -> None:
    m = col("x").list.map("x", var("x") * col("k"))  # the item and the row's column k
    assert m.typeof(schema={"x": List[int], "k": int}) == List[int]
    assert _eval(m, {"x": Optional[List[int]], "k": int}, x=[[1, 2], None, []], k=[10, 1, 2]) == [
        [10, 20], pd.NA, []
    ]  # fmt: skip
    f = col("x").list.filter("v", var("v") > 1)
    assert f.typeof(schema={"x": Optional[List[float]]}) == Optional[List[float]]
    assert _eval(f, {"x": List[Optional[int]]}, x=[[1, 2, None, 3]]) == [[2, 3]]
    with pytest.raises(ValueError, match="not bool"):
        col("x").list.filter("v", var("v") + 1).typeof(schema={"x": List[int]})
    with pytest.raises(ValueError, match="not bound"):
        col("x").list.map("v", var("w")).typeof(schema={"x": List[int]})
    with pytest.raises(InvalidExprException, match="not a Python function"):
        col("x").list.map("v", lambda v: v)


def test_all_any_and_aggregates_with_nulls() -> None:
    schema = {"x": Optional[List[Optional[bool]]]}
    rows = [[True, None], [False, None], [], None]
    assert _eval(col("x").list.all(), schema, x=rows) == [pd.NA, False, True, pd.NA]
    assert _eval(col("x").list.any(), schema, x=rows) == [True, pd.NA, False, pd.NA]
    assert col("x").list.all().typeof(schema={"x": List[bool]}) is bool
    with pytest.raises(ValueError, match="list of bools"):
        col("x").list.any().typeof(schema={"x": List[int]})
    nums = {"x": List[Optional[int]]}
    assert _eval(col("x").list.min(), nums, x=[[3, 1], [2, None], []]) == [1, pd.NA, pd.NA]
    assert _eval(col("x").list.sum(), nums, x=[[3, 1], [2, None], []]) == [4, pd.NA, 0]
    with pytest.raises(ValueError, match="list of numbers"):
        col("x").list.max().typeof(schema={"x": List[str]})


def test_contains_is_three_valued() -> None:
    e = col("x").list.contains(col("y"))
    got = _eval(e, {"x": List[Optional[int]], "y": Optional[int]},
                x=[[1, None], [1, None], [], [1]], y=pd.array([1, 2, None, None], "Int64"))  # fmt: skip
    assert got == [True, pd.NA, False, pd.NA]


# --------------------------------------------------------------------------- top level


def test_repeat_now_datetime_and_zip() -> None:
    r = repeat(col("x"), col("n"))
    assert r.typeof(schema={"x": str, "n": Optional[int]}) == Optional[List[str]]
    assert _eval(r, {"x": str, "n": int}, x=["a", "b"], n=[2, -1]) == [["a", "a"], []]
    with pytest.raises(ValueError, match="repeats a value str times"):
        r.typeof(schema={"x": str, "n": str})
    assert now().typeof() is datetime
    since = now().dt.since(col("t"), unit="day")
    assert _eval(since, {"t": datetime}, t=[pd.Timestamp.now(tz="UTC")]) == [0]
    d = dt_lit(2024, 1, 1, hour=5, timezone="Asia/Kolkata")
    assert d.typeof() is datetime
    assert _eval(d, {"x": int}, x=[1]) == [pd.Timestamp("2023-12-31 23:30", tz="UTC")]
    with pytest.raises(InvalidExprException, match="timezone"):
        dt_lit(2024, 1, 1, timezone="Mars/Base")
    with pytest.raises(InvalidExprException, match="unit must be one of"):
        col("t").dt.since_epoch(unit="nanosecond")
    z = struct_zip(Pair, a=col("a"), b=col("b"))
    assert z.typeof(schema={"a": List[int], "b": List[bool]}) == List[Pair]
    got = _eval(z, {"a": List[int], "b": List[bool]}, a=[[1, 2], []], b=[[True], [False]])
    assert got == [[Pair(1, True)], []]
    with pytest.raises(InvalidExprException, match="has no field c"):
        struct_zip(Pair, c=col("a"))


def test_make_struct_builds_a_struct_a_row() -> None:
    """Fennel's ``make_struct({...}, MyStruct)`` and ``MyStruct.expr(...)``."""
    e = make_struct({"a": col("a"), "b": col("b") > 1}, Pair)
    assert e.typeof(schema={"a": int, "b": int}) is Pair
    assert _eval(e, {"a": int, "b": int}, a=[1, 2], b=[0, 5]) == [Pair(1, False), Pair(2, True)]
    made = Pair.expr(a=col("a"), b=True)  # type: ignore[attr-defined]
    assert _eval(made, {"a": int}, a=[7]) == [Pair(7, True)]
    with pytest.raises(InvalidExprException, match="Pair has no field c; its fields: a, b"):
        make_struct({"c": col("a")}, Pair)
    with pytest.raises(ValueError, match="fills Pair.a \\(int\\) with a Optional\\[int\\]"):
        e.typeof(schema={"a": Optional[int], "b": int})  # fillnull first
    with pytest.raises(ValueError, match="leaves out a"):
        make_struct({"b": lit(True)}, Pair).typeof(schema={})


def test_eval_needs_a_schema_and_strings_keep_nulls_as_na() -> None:
    with pytest.raises(TypeError, match="needs the schema"):
        lit(1).eval(pd.DataFrame({"x": [1]}))
    e = col("s").str.upper()
    assert _eval(e, {"s": Optional[str]}, s=["a", None]) == ["A", pd.NA]
    assert col("p").struct.get("a").typeof(schema={"p": Pair}) is int
    assert col("p").struct.get("b").typeof(schema={"p": Optional[Pair]}) == Optional[bool]
    w = when(col("x") > 0).then(col("x") % 2)  # a non-zero literal divisor: no null from it
    assert (col("x") % 2).typeof(schema={"x": int}) is int
    assert w.typeof(schema={"x": int}) == Optional[int]
    assert (col("x") % col("y")).typeof(schema={"x": int, "y": int}) == Optional[int]


# --------------------------------------------------------------------------- MockClient


def test_parse_and_list_lambdas_in_a_pipeline_on_the_mock() -> None:
    webhook = Webhook(name="fennel_webhook")

    @source(webhook.endpoint("Raw"), disorder="14d", cdc="append")
    @dataset
    class Raw:
        uid: int
        amount: str
        scores: str
        ts: datetime

    @dataset
    class Clean:
        uid: int
        cents: float
        high: List[int]
        ts: datetime

        @pipeline
        @inputs(Raw)
        def clean(cls, raw):  # type: ignore[no-untyped-def]
            return raw.assign(
                cents=(col("amount").str.parse(float) * 100.0).astype(float),
                high=col("scores")
                .str.parse(List[int])
                .list.filter("s", var("s") >= 5)
                .astype(List[int]),
            ).drop("amount", "scores")

    client = MockClient()
    client.commit("expr", datasets=[Raw, Clean])
    df = pd.DataFrame({"uid": [1, 2], "amount": ["1.25", "3"], "scores": ["[1, 7, 5]", "[]"],
                       "ts": [T0, T0]})  # fmt: skip
    assert client.log("fennel_webhook", "Raw", df).status_code == 200
    out = client.get_dataset_df("Clean").sort_values("uid")
    assert out["cents"].tolist() == [125.0, 300.0]
    assert [list(v) for v in out["high"]] == [[7, 5], []]


def test_a_bad_lambda_is_refused_when_the_pipeline_is_declared() -> None:
    @source(Webhook(name="fennel_webhook").endpoint("Raw2"), disorder="14d", cdc="append")
    @dataset
    class Raw2:
        uid: int
        names: List[str]
        ts: datetime

    with pytest.raises(DeclarationError, match=r'var\("n"\) % 2 does arithmetic on str'):

        @dataset
        class Bad:
            uid: int
            names: List[str]
            ts: datetime

            @pipeline
            @inputs(Raw2)
            def bad(cls, raw):  # type: ignore[no-untyped-def]
                return raw.assign(
                    names=col("names").list.filter("n", var("n") % 2 == 0).astype(List[str])
                )


def test_since_counts_calendar_months_and_years_as_birthdays_pass() -> None:
    times = pd.to_datetime(
        ["2021-01-01 00:01:00+00:00", "2021-02-02 03:00:00+00:00", "2026-03-03 00:30:00+00:00",
         "2021-12-31 23:59:00+00:00"], utc=True,
    )  # fmt: skip
    df = pd.DataFrame({"a": times})
    start = lit("2021-01-01 00:01:00+0000").str.strptime("%Y-%m-%d %H:%M:%S%z")
    schema = {"a": datetime}
    assert col("a").dt.since(start, "year").eval(df, schema).tolist() == [0, 0, 5, 0]
    assert col("a").dt.since(start, "month").eval(df, schema).tolist() == [0, 1, 62, 11]
    assert col("a").dt.since_epoch("year").eval(df, schema).tolist() == [51, 51, 56, 51]
    back = start.dt.since(col("a"), "month").eval(df, schema).tolist()
    assert back == [0, -2, -63, -12]  # floored, as every unit is
    with pytest.raises(InvalidExprException, match="unit must be one of year, month"):
        col("a").dt.since(start, "decade")
