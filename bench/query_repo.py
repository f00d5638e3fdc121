"""The query benchmark's feature repo: two keyed, indexed datasets fed by webhooks and one
featureset whose two features are plain lookups, so a query for one uid is exactly two
dataset lookups (one per dataset) and no Python extractor.

Feast's side (``bench/query_feast.py``) declares the same thing as two FeatureViews over
the same rows: ``user_profile:country`` and ``user_stats:spend``, entity ``uid``.
"""

from __future__ import annotations

from datetime import datetime

from fennel_dagster import dataset, feature, featureset, field, meta, source
from fennel_dagster.sources import Webhook

WEBHOOK = "bench_webhook"
webhook = Webhook(name=WEBHOOK, retention="1d")


@meta(owner="bench@example.com")
@source(webhook.endpoint("profiles"), disorder="1d", cdc="upsert")
@dataset(index=True)
class UserProfile:
    uid: int = field(key=True)
    country: str
    ts: datetime


@meta(owner="bench@example.com")
@source(webhook.endpoint("stats"), disorder="1d", cdc="upsert")
@dataset(index=True)
class UserStats:
    uid: int = field(key=True)
    spend: float
    ts: datetime


@meta(owner="bench@example.com")
@featureset
class BenchFeatures:
    uid: int
    country: str = feature(UserProfile.country, default="?")
    spend: float = feature(UserStats.spend, default=0.0)


DATASETS = [UserProfile, UserStats]
FEATURESETS = [BenchFeatures]
# endpoint -> dataset it feeds, for Client.log
ENDPOINTS = {"profiles": "UserProfile", "stats": "UserStats"}
