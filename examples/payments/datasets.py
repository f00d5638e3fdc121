"""Datasets of a card-payments feature repo: transactions, users, merchants."""

from __future__ import annotations

from datetime import datetime

from fennel_dagster import dataset, expectations, field, inputs, meta, pipeline, source
from fennel_dagster.aggregate import Avg, Count, Distinct, LastK, Max, Sum
from fennel_dagster.dtypes import between, oneof
from fennel_dagster.expr import col
from fennel_dagster.lib import (
    expect_column_values_to_be_between,
    expect_column_values_to_be_in_set,
    expect_column_values_to_not_be_null,
)
from fennel_dagster.sources import Kafka, Webhook
from fennel_dagster.window import Continuous

kafka = Kafka(name="payments_kafka")
webhook = Webhook(name="ops_webhook", retention="14d")


@meta(owner="payments@example.com", tags=["pii:none"])
@source(kafka.topic("transactions"), disorder="1h", cdc="append")
@dataset
class Transaction:
    """Card transactions as the payment switch emits them."""

    txn_id: int
    uid: int
    merchant_id: int
    amount: between(float, 0, 1_000_000)
    currency: oneof(str, ["EUR", "GBP", "USD"])
    channel: str
    ts: datetime

    @expectations
    def checks(cls):
        return [
            expect_column_values_to_be_between("amount", 0, 50_000, mostly=0.99),
            expect_column_values_to_be_in_set("channel", ["pos", "web", "app"], mostly=0.95),
            expect_column_values_to_not_be_null("uid"),
        ]


@meta(owner="crm@example.com")
@source(webhook.endpoint("users"), disorder="1d", cdc="upsert")
@dataset(index=True)
class User:
    """One row per user, upserted by the CRM through a webhook."""

    uid: int = field(key=True)
    country: str
    signup_at: datetime
    updated_at: datetime = field(timestamp=True)


@meta(owner="risk@example.com")
@source(webhook.endpoint("merchants"), disorder="1d", cdc="upsert")
@dataset(index=True)
class Merchant:
    """Merchant risk categories, pushed by the risk team."""

    merchant_id: int = field(key=True)
    category: str
    risk_tier: int
    ts: datetime


@meta(owner="payments@example.com")
@dataset
class EnrichedTransaction:
    """Transactions in EUR with the merchant's category and the user's country."""

    txn_id: int
    uid: int
    merchant_id: int
    amount_eur: float
    is_web: bool
    category: str | None
    risk_tier: int | None
    country: str | None
    ts: datetime

    @pipeline
    @inputs(Transaction, Merchant, User)
    def enrich(cls, txn, merchant, user):
        rate = {"EUR": 1.0, "GBP": 1.17, "USD": 0.92}
        in_eur = txn.assign(
            "amount_eur", float, lambda df: df["amount"] * df["currency"].map(rate)
        ).assign(is_web=(col("channel") == "web").astype(bool))
        with_merchant = in_eur.join(merchant, how="left", on=["merchant_id"])
        with_user = with_merchant.join(user, how="left", on=["uid"], fields=["country"])
        return with_user.drop("amount", "currency", "channel")


@meta(owner="payments@example.com")
@dataset(index=True)
class UserSpend:
    """Per-user spend over trailing windows."""

    uid: int = field(key=True)
    txns_1h: int
    spend_7d: float
    avg_txn_7d: float
    max_txn_7d: float
    txns_forever: int
    web_txns_7d: int
    recent_merchants: list[int]
    categories_7d: list[str]
    ts: datetime

    @pipeline
    @inputs(EnrichedTransaction)
    def agg(cls, txn):
        return (
            txn.filter(col("amount_eur") > 0)
            .assign(
                web=col("is_web").astype(int),
                category_str=col("category").fillnull("unknown").astype(str),
            )
            .groupby("uid")
            .aggregate(
                txns_1h=Count(window=Continuous("1h")),
                spend_7d=Sum(of="amount_eur", window=Continuous("7d")),
                avg_txn_7d=Avg(of="amount_eur", window=Continuous("7d")),
                max_txn_7d=Max(of="amount_eur", window=Continuous("7d"), default=0.0),
                txns_forever=Count(window=Continuous("forever")),
                web_txns_7d=Sum(of="web", window=Continuous("7d")),
                recent_merchants=LastK(
                    of="merchant_id", limit=5, dedup=True, window=Continuous("7d")
                ),
                categories_7d=Distinct(of="category_str", window=Continuous("7d")),
            )
        )


@meta(owner="risk@example.com")
@dataset(index=True)
class MerchantVolume:
    """Per-merchant transaction count over the last day."""

    merchant_id: int = field(key=True)
    txns_1d: int
    ts: datetime

    @pipeline
    @inputs(EnrichedTransaction)
    def volume(cls, txn):
        return txn.groupby("merchant_id").aggregate(txns_1d=Count(window=Continuous("1d")))


DATASETS = [Transaction, User, Merchant, EnrichedTransaction, UserSpend, MerchantVolume]
