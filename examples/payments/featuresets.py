"""Featuresets of the payments repo: what a fraud model asks for at authorisation time."""

from __future__ import annotations

import pandas as pd

from examples.payments.datasets import MerchantVolume, User, UserSpend
from fennel_dagster import extractor, feature, featureset, inputs, meta, outputs
from fennel_dagster.expr import col


@meta(owner="risk@example.com")
@featureset
class UserFeatures:
    uid: int
    spend_7d: float = feature(UserSpend.spend_7d, default=0.0)
    txns_1h: int = feature(UserSpend.txns_1h, default=0)
    avg_txn_7d: float = feature(UserSpend.avg_txn_7d, default=0.0)
    country: str = feature(User.country, default="unknown")
    is_heavy_spender: bool = feature(col("spend_7d") > 1000.0)
    account_age_days: float

    @extractor(deps=[User])
    @inputs("uid")
    @outputs("account_age_days")
    def account_age(cls, ts: pd.Series, uid: pd.Series):
        users, found = User.lookup(ts, uid=uid, fields=["signup_at"])
        age = (ts - users["signup_at"]).dt.total_seconds() / 86400.0
        return pd.DataFrame({"account_age_days": age.where(found, -1.0).fillna(-1.0)})


@meta(owner="risk@example.com")
@featureset
class TxnFeatures:
    uid: int
    merchant_id: int
    amount: float
    merchant_txns_1d: int
    amount_vs_avg: float
    user_spend_7d: float = feature(UserFeatures.spend_7d)

    @extractor(deps=[MerchantVolume, UserSpend])
    @inputs("uid", "merchant_id", "amount")
    @outputs("merchant_txns_1d", "amount_vs_avg")
    def risk(cls, ts: pd.Series, uid: pd.Series, merchant_id: pd.Series, amount: pd.Series):
        volume, _ = MerchantVolume.lookup(ts, merchant_id=merchant_id, fields=["txns_1d"])
        spend, found = UserSpend.lookup(ts, uid=uid, fields=["avg_txn_7d"])
        avg = spend["avg_txn_7d"].where(found, 0.0).fillna(0.0)
        ratio = (amount / avg.where(avg > 0, 1.0)).astype(float)
        return pd.DataFrame(
            {
                "merchant_txns_1d": volume["txns_1d"].fillna(0).astype("int64"),
                "amount_vs_avg": ratio,
            }
        )


FEATURESETS = [UserFeatures, TxnFeatures]
