"""Declaring datasets: fields, keys, timestamps, types and their exact errors."""

from __future__ import annotations

from datetime import date, datetime

import pytest

from fennel_dagster import DeclarationError, dataset, field, meta, source
from fennel_dagster.declare import dataset_spec
from fennel_dagster.dtypes import Embedding, between, oneof, regex, struct
from fennel_dagster.sources import S3, Kafka, Postgres, Webhook
from fennel_dagster.wire import spec


@struct
class Address:
    city: str
    zip_code: int | None


def test_fields_keys_timestamp_and_every_type_map_to_the_ir() -> None:
    @meta(owner="t@example.com", tags=["b", "a"])
    @dataset(version=3, index=True, history="30d")
    class Profile:
        uid: int = field(key=True)
        score: between(float, 0, 1)
        tier: oneof(str, ["gold", "silver"])
        email: regex(r"[^@]+@[^@]+")
        nickname: str | None
        tags: list[str]
        attrs: dict[str, float]
        vec: Embedding[4]
        home: Address
        born: date
        raw: bytes
        active: bool
        updated: datetime

    ds = dataset_spec(Profile)
    types = {f.name: f.dtype for f in ds.fields}
    assert ds.version == 3 and ds.index and ds.history == 30 * 86400
    assert ds.keys == ("uid",) and ds.timestamp == "updated"
    assert ds.meta == spec.MetaSpec(owner="t@example.com", tags=("a", "b"))
    assert types["score"] == spec.BetweenType(spec.FloatType(), 0.0, 1.0)
    assert types["tier"] == spec.OneOfType(spec.StringType(), ("gold", "silver"))
    assert types["email"] == spec.RegexType(r"[^@]+@[^@]+")
    assert types["nickname"] == spec.OptionalType(spec.StringType())
    assert types["tags"] == spec.ListType(spec.StringType())
    assert types["attrs"] == spec.MapType(spec.FloatType())
    assert types["vec"] == spec.EmbeddingType(4)
    assert types["home"] == spec.StructType(
        "Address",
        (
            spec.StructField("city", spec.StringType()),
            spec.StructField("zip_code", spec.OptionalType(spec.IntType())),
        ),
    )
    assert types["born"] == spec.DateType() and types["raw"] == spec.BytesType()


def test_a_unique_datetime_field_is_picked_as_the_timestamp() -> None:
    @dataset
    class Clicks:
        uid: int
        at: datetime

    assert dataset_spec(Clicks).timestamp == "at"


def test_two_datetime_fields_without_timestamp_marker_are_rejected() -> None:
    with pytest.raises(DeclarationError) as e:

        @dataset
        class Orders:
            created: datetime
            shipped: datetime

    assert str(e.value) == (
        "Multiple timestamp fields are not supported in dataset Orders: it needs exactly one "
        "event-time field, found datetime fields (created, shipped); mark one with "
        "field(timestamp=True)"
    )


def test_no_datetime_field_and_an_index_without_keys_are_rejected() -> None:
    with pytest.raises(DeclarationError, match="^No timestamp field found in dataset Bare"):

        @dataset
        class Bare:
            uid: int

    with pytest.raises(DeclarationError) as e:

        @dataset(index=True)
        class Unkeyed:
            uid: int
            ts: datetime

    assert str(e.value) == (
        "dataset Unkeyed has index=True but no key field: an index answers lookups by key; "
        "mark the key with field(key=True), or drop index=True"
    )


def test_optional_key_is_rejected_with_the_fix() -> None:
    with pytest.raises(DeclarationError) as e:

        @dataset
        class Accounts:
            uid: int | None = field(key=True)
            ts: datetime

    assert str(e.value) == (
        "Key uid in dataset Accounts cannot be Optional: keys cannot be null; declare it as "
        "`uid: int = field(key=True)`"
    )


def test_unsupported_type_names_the_field_and_the_supported_types() -> None:
    with pytest.raises(
        DeclarationError, match=r"^Things\.blob: unsupported type <class 'object'>; use int"
    ):

        @dataset
        class Things:
            blob: object
            ts: datetime


def test_sources_record_connector_cdc_and_durations_without_secrets() -> None:
    kafka = Kafka(name="events", bootstrap_servers="broker:9092", sasl_password="hunter2")

    @source(kafka.topic("clicks"), disorder="2h", cdc="append", since="2026-01-01T00:00:00")
    @dataset
    class Click:
        uid: int
        ts: datetime

    (src,) = dataset_spec(Click).sources
    assert src.connector.kind == "kafka" and src.connector.name == "events"
    config = dict(src.connector.config)
    assert config["topic"] == "clicks" and "sasl_password" not in config
    assert src.disorder == 7200 and src.since == "2026-01-01T00:00:00+00:00"


def test_every_connector_kind_declares_its_reference() -> None:
    refs = [
        S3(name="lake").bucket("data", prefix="users/", format="parquet"),
        Postgres(name="crm", db_name="crm").table("users", cursor="updated_at"),
        Webhook(name="hook").endpoint("Users"),
    ]
    kinds = [r.to_ir().kind for r in refs]
    assert kinds == ["s3", "postgres", "webhook"]
    assert dict(refs[1].to_ir().config)["cursor"] == "updated_at"


def test_bad_cdc_and_bad_durations_are_explained() -> None:
    with pytest.raises(
        DeclarationError,
        match=r"@source\(cdc='merge'\): use one of append, upsert, debezium, native",
    ):
        source(Webhook(name="h").endpoint("e"), cdc="merge")
    with pytest.raises(DeclarationError, match=r"'7 days' is not a duration; write e.g. '30s'"):

        @source(Webhook(name="h").endpoint("e"), disorder="7 days")
        @dataset
        class Late:
            ts: datetime


def test_expectations_become_great_expectations_configurations() -> None:
    from examples.payments.datasets import Transaction

    exp = dataset_spec(Transaction).expectations
    assert exp is not None
    by_type = {e.type: dict(e.kwargs) for e in exp.expectations}
    assert by_type["expect_column_values_to_be_between"] == {
        "column": "amount", "min_value": 0, "max_value": 50_000, "mostly": 0.99,
    }  # fmt: skip
    assert by_type["expect_column_values_to_be_in_set"]["value_set"] == ("app", "pos", "web")
    assert by_type["expect_column_values_to_not_be_null"] == {"column": "uid", "mostly": 1.0}
