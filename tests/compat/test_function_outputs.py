"""What a pipeline's own functions hand back, as Fennel's client tests write them: bytes for
a ``str`` field (``base64.b64encode``) and struct values built by an ``@includes`` helper.
No ``from __future__ import annotations``: a dataset declared in a test names a local struct,
as Fennel's tests do, which string annotations could not resolve."""

from datetime import UTC, datetime

import pandas as pd
import pytest

from fennel_dagster import Dataset, dataset, field, inputs, pipeline
from fennel_dagster.dtypes import struct
from fennel_dagster.lib import includes
from fennel_dagster.mock import MockClient
from fennel_dagster.mock.client import MockError
from fennel_dagster.sources import Webhook, source

__owner__ = "compat@example.com"

WEBHOOK = Webhook(name="fennel_webhook")
T0 = datetime(2024, 1, 1, tzinfo=UTC)


@source(WEBHOOK.endpoint("Blobs"), disorder="1d", cdc="append")
@dataset
class Blobs:
    payload: bytes
    ts: datetime


@dataset
class Encoded:
    text: str
    ts: datetime

    @pipeline
    @inputs(Blobs)
    def encode(cls, blobs: Dataset):
        def b64(df: pd.DataFrame) -> pd.DataFrame:
            import base64

            return df.assign(text=df["payload"].apply(base64.b64encode))

        schema = blobs.schema()
        schema["text"] = str
        return blobs.transform(b64, schema).drop("payload")


@dataset
class Assigned:
    payload: bytes
    text: str
    ts: datetime

    @pipeline
    @inputs(Blobs)
    def as_text(cls, blobs: Dataset):
        return blobs.assign("text", str, lambda df: df["payload"])


def test_utf8_bytes_returned_for_a_str_field_are_its_text_and_other_bytes_an_error_row() -> None:
    client = MockClient()
    client.commit("v1", datasets=[Blobs, Encoded, Assigned])
    client.log("fennel_webhook", "Blobs", pd.DataFrame({"payload": [b"hello", b"world"],
                                                         "ts": [T0, T0]}))  # fmt: skip
    assert sorted(client.inspect("Encoded")["text"].tolist()) == ["aGVsbG8=", "d29ybGQ="]
    assert sorted(client.inspect("Assigned")["text"].tolist()) == ["hello", "world"]

    with pytest.raises(MockError, match=r"'text' \(declared str\).*is not a str"):
        client.log("fennel_webhook", "Blobs", pd.DataFrame({"payload": [b"\xff\xfe"], "ts": [T0]}))
    lenient = MockClient(strict=False)
    lenient.commit("v1", datasets=[Blobs, Assigned])
    result = lenient.log("fennel_webhook", "Blobs", pd.DataFrame({"payload": [b"\xff", b"ok"],
                                                                   "ts": [T0, T0]}))  # fmt: skip
    assert lenient.inspect("Assigned")["text"].tolist() == ["ok"]
    assert len(result.errors) == 1 and "is not a str" in result.errors[0].reason


def test_a_struct_named_in_includes_ships_with_the_helpers_that_build_it() -> None:
    @struct
    class Point:
        value: int
        at: datetime

    @includes(Point)
    def to_point(row: pd.Series) -> Point:
        return Point(value=row["value"], at=row["ts"])  # type: ignore[call-arg]

    @source(WEBHOOK.endpoint("Readings"), disorder="1d", cdc="append")
    @dataset
    class Readings:
        uid: int
        value: int
        ts: datetime

    @dataset(index=True)
    class Latest:
        uid: int = field(key=True)
        point: Point
        ts: datetime

        @pipeline
        @includes(Point, to_point)
        @inputs(Readings)
        def latest(cls, readings: Dataset):
            pointed = readings.assign(
                "point", Point, lambda df: df[["value", "ts"]].apply(to_point, axis=1)
            )
            return pointed.drop("value").groupby("uid").first()

    client = MockClient()
    client.commit("v1", datasets=[Readings, Latest])
    client.log("fennel_webhook", "Readings",
               pd.DataFrame({"uid": [1, 2], "value": [10, 20], "ts": [T0, T0]}))  # fmt: skip
    found, ok = client.lookup("Latest", keys=pd.DataFrame({"uid": [1, 2]}))
    assert ok.tolist() == [True, True]
    assert [p.value for p in found["point"]] == [10, 20]


@source(WEBHOOK.endpoint("Views"), disorder="1d", cdc="append")
@dataset
class Views:
    uid: int
    seconds: float
    ts: datetime


@dataset
class Clicks:
    uid: int
    short: int
    origin: str
    ts: datetime

    @pipeline
    @inputs(Views)
    def clicks(cls, views: Dataset):
        schema = {"uid": int, "short": int, "origin": str, "ts": datetime}
        return views.transform(lambda df: cls.label(df, "web"), schema=schema)

    @classmethod
    def label(cls, df: pd.DataFrame, origin: str) -> pd.DataFrame:
        df["short"] = df["seconds"] < cls.threshold()  # bools, for an int field
        df[str(cls.origin)] = origin
        return df.drop(columns=["seconds"])

    @staticmethod
    def threshold() -> float:
        return 5.0


def test_a_pipeline_calls_its_datasets_own_methods_and_bools_fill_an_int_field() -> None:
    client = MockClient()
    client.commit("v1", datasets=[Views, Clicks])
    client.log("fennel_webhook", "Views",
               pd.DataFrame({"uid": [1, 2], "seconds": [3.0, 9.0], "ts": [T0, T0]}))  # fmt: skip
    rows = client.inspect("Clicks").sort_values("uid")
    assert rows["short"].tolist() == [1, 0]
    assert rows["origin"].tolist() == ["web", "web"]


@struct
class Movie:
    movie_id: int
    title: str


@source(WEBHOOK.endpoint("Casting"), disorder="1d", cdc="append")
@dataset
class Casting:
    movie: Movie
    actor: str
    ts: datetime


@dataset(index=True)
class CastSize:
    movie: Movie = field(key=True)
    actors: int
    ts: datetime

    @pipeline
    @inputs(Casting)
    def size(cls, casting: Dataset):
        from fennel_dagster.aggregate import Count
        from fennel_dagster.dtypes import Continuous

        return casting.groupby("movie").aggregate(actors=Count(window=Continuous("forever")))


def test_a_struct_valued_key_groups_and_looks_up_by_its_fields_in_any_order() -> None:
    client = MockClient()
    client.commit("v1", datasets=[Casting, CastSize])
    inception = {"movie_id": 101, "title": "Inception"}
    titanic = {"title": "Titanic", "movie_id": 102}  # another dict order: the same struct
    client.log("fennel_webhook", "Casting", pd.DataFrame({
        "movie": [inception, titanic, {"title": "Inception", "movie_id": 101}],
        "actor": ["Leonardo", "Kate", "Ellen"], "ts": [T0, T0, T0],
    }))  # fmt: skip
    keys = pd.DataFrame({"movie": [{"title": "Inception", "movie_id": 101},
                                   Movie(movie_id=102, title="Titanic")]})  # type: ignore[call-arg]  # fmt: skip
    found, ok = client.lookup("CastSize", keys=keys)
    assert ok.tolist() == [True, True]
    assert found["actors"].tolist() == [2, 1]
