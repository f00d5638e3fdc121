"""Every expression function gives the same values on Spark as on pandas (the engine's).

One table with nulls, negatives, zeros, empty strings and lists, evaluated by
``ops.expr.evaluate`` (pandas, what the engine and the mock run) and by
``batch.expr.to_column`` (native Spark Columns) on the real local Spark.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any, Optional

import pandas as pd
import pytest

from fennel_dagster.batch.expr import REFUSED, SparkUnsupported, java_pattern, spark_type, to_column
from fennel_dagster.declare.expr import struct_zip
from fennel_dagster.dtypes import struct
from fennel_dagster.expr import (
    Expr,
    col,
    from_epoch,
    lit,
    make_struct,
    now,
    repeat,
    var,
    when,
)
from fennel_dagster.ops.expr import FUNCTIONS, evaluate
from fennel_dagster.wire import spec

pytestmark = pytest.mark.services

FIELDS = {
    "i": spec.OptionalType(spec.IntType()),
    "j": spec.IntType(),
    "x": spec.OptionalType(spec.FloatType()),
    "s": spec.OptionalType(spec.StringType()),
    "t": spec.TimestampType(),
    "u": spec.TimestampType(),
    "l": spec.ListType(spec.IntType()),
    "b": spec.OptionalType(spec.BoolType()),
    "p": spec.StructType("Point", (spec.StructField("a", spec.IntType()),)),
    "m": spec.ListType(spec.OptionalType(spec.IntType())),
}
ROWS: list[dict[str, Any]] = [
    {"i": 1, "j": 3, "x": 1.5, "s": "Hello", "t": datetime(2026, 1, 5, 10, 30, 15, tzinfo=UTC),
     "u": datetime(2026, 1, 1, tzinfo=UTC), "l": [1, 2], "b": True, "p": {"a": 1}, "m": [1, None]},
    {"i": -7, "j": 3, "x": -2.25, "s": "  pad \t", "t": datetime(2025, 12, 31, 23, 59, 59, tzinfo=UTC),
     "u": datetime(2026, 1, 1, tzinfo=UTC), "l": [], "b": False, "p": {"a": -2}, "m": []},
    {"i": 7, "j": -3, "x": 0.0, "s": "a,b,,c", "t": datetime(2024, 2, 29, 0, 0, 1, tzinfo=UTC),
     "u": datetime(2024, 2, 28, tzinfo=UTC), "l": [5], "b": None, "p": {"a": 0}, "m": [None]},
    {"i": None, "j": 2, "x": None, "s": None, "t": datetime(2026, 6, 7, 8, 9, 10, tzinfo=UTC),
     "u": datetime(2026, 6, 1, tzinfo=UTC), "l": [7, 8, 9], "b": True, "p": {"a": 4}, "m": [3, 4]},
    {"i": 12, "j": 0, "x": 10.0, "s": "", "t": datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC),
     "u": datetime(2026, 3, 1, 11, 0, 0, tzinfo=UTC), "l": [0], "b": False, "p": {"a": 5}, "m": [0, 5]},
    {"i": 5, "j": -2, "x": 2.5, "s": "Ab", "t": datetime(2026, 1, 4, 0, 0, 0, tzinfo=UTC),
     "u": datetime(2026, 1, 1, tzinfo=UTC), "l": [2, 2], "b": None, "p": {"a": 6}, "m": [2, None, 2]},
]  # fmt: skip

i, j, x, s, t, u, li, b, pt, m = (col(n) for n in FIELDS)


@struct
class Parsed:
    a: int
    b: Optional[bool]  # noqa: UP045 - as users write it


CASES: dict[str, Expr] = {
    "add": i + j, "sub": i - j, "mul": x * j, "truediv": i / j, "floordiv": i // j,
    "mod": i % j, "pow": x**2, "neg": -x,
    "eq": i == 7, "ne": i != 7, "lt": x < 1.5, "le": x <= 1.5, "gt": j > 0, "ge": j >= 0,
    "and": (j > 0) & b, "or": (j > 0) | b, "not": ~b,
    "isnull": i.isnull(), "fillnull": i.fillnull(0),
    "astype": j.astype(float),
    "when": when(i > 5).then(lit("big")).when(i > 0).then(lit("small")).otherwise(lit("none")),
    "str.len": s.str.len(), "str.lower": s.str.lower(), "str.upper": s.str.upper(),
    "str.strip": s.str.strip(), "str.contains": s.str.contains("b"),
    "str.startswith": s.str.startswith("A"), "str.endswith": s.str.endswith("o"),
    "str.split": s.str.split(","), "str.concat": s.str.concat(lit("!")),
    "str.strptime": lit("2026-01-05 10:30").str.strptime("%Y-%m-%d %H:%M"),
    "dt.year": t.dt.year, "dt.month": t.dt.month, "dt.day": t.dt.day, "dt.hour": t.dt.hour,
    "dt.minute": t.dt.minute, "dt.second": t.dt.second, "dt.day_of_week": t.dt.day_of_week,
    "dt.since": t.dt.since(u, "hour"), "dt.since_epoch": t.dt.since_epoch("day"),
    "dt.since in months": t.dt.since(u, "month"), "dt.since in years back": u.dt.since(t, "year"),
    "dt.since in months back": u.dt.since(t, "month"),
    "dt.since_epoch in years": t.dt.since_epoch("year"),
    "str.strptime with an offset": lit("2026-01-05 10:30 +0530").str.strptime("%Y-%m-%d %H:%M %z"),
    "dt.strftime": t.dt.strftime("%Y/%m/%d %H:%M"),
    "str.contains of a column": s.str.contains(s.str.lower()),
    "str.startswith of a column": s.str.startswith(s.str.upper()),
    "str.endswith of a column": s.str.endswith(s.str.strip()),
    "list.contains of a column": li.list.contains(i),
    "list.at of a column": li.list.at(j),
    "dt.hour in Kathmandu": t.dt.with_tz(timezone="Asia/Kathmandu").hour,
    "dt.day in US/Eastern": t.dt.with_tz(timezone="US/Eastern").day,
    "dt.strftime in US/Eastern": t.dt.with_tz(timezone="US/Eastern").strftime("%Y/%m/%d %H:%M"),
    "num.from_epoch": from_epoch(j * 86400 * 400, unit="second"),
    "num.from_epoch in ms": from_epoch(i * 3_600_000, unit="millisecond"),
    "num.floor of x": x.floor(),
    "num.abs": x.abs(), "num.ceil": x.num.ceil(), "num.floor": x.num.floor(),
    "num.round": x.round(), "num.round to 1 decimal": (x * 1.05).round(1),
    "num.round of an int": j.round(), "num.sqrt": j.num.sqrt(), "num.log": j.num.log(),
    "num.log base 2": j.num.log(base=2.0), "num.log base 10 of x": x.num.log(base=10.0),
    "num.sin": x.num.sin(), "num.cos": x.num.cos(), "num.tan": x.num.tan(),
    "num.arcsin": (x / 3).num.arcsin(), "num.arccos": (x / 3).num.arccos(),
    "num.arctan": x.num.arctan(), "pow of ints": j.num.pow(lit(3)),
    "pow to a float exponent": j.num.pow(lit(-1.0)),
    "str.parse": s.str.len().num.to_string().str.parse(int),
    "str.parse of a list": lit("[1.5, null, 2]").str.parse(list[Optional[float]]),  # noqa: UP045
    "str.parse of a struct": lit('{"a": 3, "b": true}').str.parse(Parsed),
    "str.parse of a string": lit('"').str.concat(s.str.len().num.to_string()).str.concat(lit('"')).str.parse(str),
    "now": now().dt.since(t, "day"),
    "zip": struct_zip(Parsed, a=li, b=m.list.map("v", var("v") > 1)),
    "zip of one list": struct_zip(Parsed, a=li),
    "make_struct": make_struct({"a": j, "b": b}, Parsed),
    "make_struct leaving a field out": Parsed.expr(a=j * 2),  # type: ignore[attr-defined]
    "repeat": repeat(b, j), "repeat of a column": repeat(s, i),
    "list.all": m.list.map("v", var("v") > 1).list.all(),
    "list.any": m.list.map("v", var("v") > 1).list.any(),
    "list.map": m.list.map("v", var("v") * j + i),
    "list.map nested": li.list.map("v", m.list.filter("w", var("w") > var("v")).list.len()),
    "list.filter": m.list.filter("v", var("v") > 1),
    "list.filter of nulls": m.list.filter("v", var("v").isnull()),
    "list.min with nulls": m.list.min(), "list.max with nulls": m.list.max(),
    "list.sum with nulls": m.list.sum(), "list.mean with nulls": m.list.mean(),
    "list.contains with nulls": m.list.contains(2), "list.contains null": m.list.contains(i),
    "num.to_string": i.num.to_string(),
    "list.len": li.list.len(), "list.contains": li.list.contains(2), "list.at": li.list.at(1),
    "list.sum": li.list.sum(), "list.min": li.list.min(), "list.max": li.list.max(),
    "list.mean": li.list.mean(), "list.hasnull": li.list.hasnull(),
    "struct.get": pt.struct.get("a"),
}  # fmt: skip


def _norm(v: Any) -> Any:
    if v is None or v is pd.NA or v is pd.NaT:
        return None
    if isinstance(v, float) and math.isnan(v):
        return None  # pandas holds a missing float as NaN: the platform's null
    if isinstance(v, pd.Timestamp):
        return v.to_pydatetime().astimezone(UTC).replace(tzinfo=None)
    if isinstance(v, datetime):
        return (v.astimezone(UTC) if v.tzinfo else v).replace(tzinfo=None)
    if hasattr(v, "asDict"):  # a Spark Row (a tuple) holds a struct
        return {k: _norm(e) for k, e in v.asDict().items()}
    if hasattr(v, "tolist"):
        return [_norm(e) for e in v.tolist()]
    if isinstance(v, list | tuple):
        return [_norm(e) for e in v]
    if isinstance(v, bool):
        return v
    if isinstance(v, dict) or hasattr(v, "asDict"):
        return {k: _norm(e) for k, e in (v if isinstance(v, dict) else v.asDict()).items()}
    if isinstance(v, int | float):
        return round(float(v), 9)
    return v


@pytest.fixture(scope="module")
def frames(spark: Any) -> tuple[pd.DataFrame, Any]:
    pdf = pd.DataFrame(ROWS)
    pdf["i"] = pdf["i"].astype("Int64")
    pdf["x"] = pdf["x"].astype(float)
    pdf["b"] = pdf["b"].astype("boolean")
    from pyspark.sql import types as T  # noqa: N812

    schema = T.StructType(
        [T.StructField("_row", T.LongType())]
        + [T.StructField(n, spark_type(d)) for n, d in FIELDS.items()]
    )
    sdf = spark.createDataFrame([{"_row": k, **r} for k, r in enumerate(ROWS)], schema)
    return pdf, sdf


def test_every_function_of_the_registry_has_a_case() -> None:
    covered = {name.split(" ")[0] for name in CASES if name != "when"}
    assert FUNCTIONS - covered == set(REFUSED), FUNCTIONS - covered


@pytest.mark.parametrize("name", sorted(CASES))
def test_spark_computes_what_pandas_computes(name: str, frames: tuple[pd.DataFrame, Any]) -> None:
    pdf, sdf = frames
    node = CASES[name].to_ir()
    want = [_norm(v) for v in evaluate(node, pdf).tolist()]
    rows = sdf.select("_row", to_column(node).alias("v")).orderBy("_row").collect()
    got = [_norm(r["v"]) for r in rows]
    assert got == want, f"{name}: spark {got} != pandas {want}"


def test_refused_functions_say_why() -> None:
    with pytest.raises(SparkUnsupported, match="json_extract is not available on Spark"):
        to_column(col("s").str.json_extract("$.a").to_ir())


def test_formats_translate_or_are_refused() -> None:
    assert java_pattern("%Y-%m-%dT%H:%M:%S.%f") == "yyyy'-'MM'-'dd'T'HH':'mm':'ss'.'SSSSSS"
    with pytest.raises(SparkUnsupported, match="format code %U"):
        java_pattern("%U")


@pytest.mark.parametrize(
    ("text", "target"),
    [("False", bool), ("hi", str), ("1", str), ("[1, 2, 3", list[int]), ("1.1.1", float),
     ("1.5", int)],
)  # fmt: skip
def test_bad_json_fails_on_both(text: str, target: Any, frames: tuple[pd.DataFrame, Any]) -> None:
    pdf, sdf = frames
    node = lit(text).str.parse(target).to_ir()
    with pytest.raises(ValueError, match="str.parse"):
        evaluate(node, pdf)
    with pytest.raises(Exception, match="(?i)malformed|str.parse|parse"):
        sdf.select(to_column(node).alias("v")).collect()


def test_int_to_a_negative_int_power_fails_on_both(frames: tuple[pd.DataFrame, Any]) -> None:
    pdf, sdf = frames
    node = col("j").num.pow(lit(-2)).to_ir()
    with pytest.raises(ValueError, match="negative int power"):
        evaluate(node, pdf)
    with pytest.raises(Exception, match="negative int power"):
        sdf.select(to_column(node).alias("v")).collect()
