"""Feature graphs for protocol tests: small, so each commit makes a handful of real assets."""

from __future__ import annotations

import os
import sys
from datetime import datetime
from typing import Any

from fennel_dagster import dataset, field, inputs, meta, pipeline, source
from fennel_dagster.aggregate import Sum
from fennel_dagster.client import LocalClient
from fennel_dagster.settings import Settings
from fennel_dagster.sources import Webhook
from fennel_dagster.window import Continuous

OWNER = "team@example.com"
hook = Webhook(name="hook")


def graph(
    spend_version: int = 1, window: str = "7d", with_extra: bool = False, offline: bool = False
) -> list[Any]:
    """T (source) -> S (aggregate, version ``spend_version``), plus U when ``with_extra``."""

    @meta(owner=OWNER)
    @source(hook.endpoint("t"))
    @dataset(offline=offline)
    class T:
        uid: int
        amount: float
        ts: datetime

    @meta(owner=OWNER)
    @dataset(index=True, version=spend_version, offline=offline)
    class S:
        uid: int = field(key=True)
        total: float
        ts: datetime

        @pipeline
        @inputs(T)
        def agg(cls, t):
            return t.groupby("uid").aggregate(total=Sum(of="amount", window=Continuous(window)))

    out: list[Any] = [T, S]
    if with_extra:

        @meta(owner=OWNER)
        @source(hook.endpoint("u"), cdc="upsert")
        @dataset(index=True, offline=True)
        class U:
            uid: int = field(key=True)
            name: str
            ts: datetime

        out.append(U)
    return out


GRAPHS = {
    "v1": lambda: graph(1, "7d"),
    "v2": lambda: graph(2, "30d"),
    "v2+u": lambda: graph(2, "30d", with_extra=True),
    "v3": lambda: graph(3, "1d"),
}


def settings_for(schema: str) -> Settings:
    return Settings(pg_schema=schema, namespace=schema)


def main() -> None:
    """``python -m tests.commit_protocol.scenario SCHEMA BRANCH GRAPH``: one commit, for crash tests."""
    schema, branch, name = sys.argv[1:4]
    with LocalClient(settings_for(schema), branch=branch) as client:
        out = client.commit(f"commit {name} from pid {os.getpid()}", GRAPHS[name]())
        print(f"committed {out.outcome.commit_id}")  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
