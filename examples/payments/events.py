"""Deterministic synthetic events for the payments repo (for demos, tests and benchmarks)."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pandas as pd

CHANNELS = ["pos", "web", "app"]
CURRENCIES = ["EUR", "GBP", "USD"]
CATEGORIES = ["grocery", "travel", "electronics", "fuel", "gaming"]
COUNTRIES = ["DE", "FR", "GB", "NL", "US"]


@dataclass(frozen=True)
class Events:
    users: pd.DataFrame
    merchants: pd.DataFrame
    transactions: pd.DataFrame


def generate(
    n_users: int = 50,
    n_merchants: int = 20,
    n_transactions: int = 2000,
    start: str = "2026-01-01T00:00:00+00:00",
    days: int = 14,
    seed: int = 7,
) -> Events:
    rng = random.Random(seed)
    t0 = pd.Timestamp(start)
    users = pd.DataFrame(
        {
            "uid": list(range(1, n_users + 1)),
            "country": [rng.choice(COUNTRIES) for _ in range(n_users)],
            "signup_at": [t0 - pd.Timedelta(days=rng.randint(1, 900)) for _ in range(n_users)],
            "updated_at": [t0 - pd.Timedelta(hours=1)] * n_users,
        }
    )
    merchants = pd.DataFrame(
        {
            "merchant_id": list(range(1, n_merchants + 1)),
            "category": [rng.choice(CATEGORIES) for _ in range(n_merchants)],
            "risk_tier": [rng.randint(1, 3) for _ in range(n_merchants)],
            "ts": [t0 - pd.Timedelta(hours=1)] * n_merchants,
        }
    )
    offsets = sorted(rng.uniform(0, days * 86400) for _ in range(n_transactions))
    transactions = pd.DataFrame(
        {
            "txn_id": list(range(1, n_transactions + 1)),
            "uid": [rng.randint(1, n_users) for _ in range(n_transactions)],
            "merchant_id": [rng.randint(1, n_merchants) for _ in range(n_transactions)],
            "amount": [round(rng.lognormvariate(3.5, 1.0), 2) for _ in range(n_transactions)],
            "currency": [rng.choice(CURRENCIES) for _ in range(n_transactions)],
            "channel": [rng.choice(CHANNELS) for _ in range(n_transactions)],
            "ts": [t0 + pd.Timedelta(seconds=round(o, 3)) for o in offsets],
        }
    )
    return Events(users, merchants, transactions)
