"""A source's ``since``/``until`` keep the same rows on the mock as in the engine's source job
(``ops.source_rules.in_time_range``): ``since <= ts < until``, the others dropped quietly."""

from __future__ import annotations

import json
from datetime import datetime

import pandas as pd

from fennel_dagster import commit_spec, dataset, meta, source
from fennel_dagster.commit.compiler import compile_blueprints, jobs_of
from fennel_dagster.commit.graph import EntityGraph
from fennel_dagster.engine.jobs.source import SourceJob
from fennel_dagster.engine.messages import InMessage
from fennel_dagster.mock import MockClient
from fennel_dagster.ops.batches import rows_of
from fennel_dagster.ops.state import MemoryState
from fennel_dagster.sources import Webhook
from fennel_dagster.wire import plan

T0 = pd.Timestamp("2026-01-01", tz="UTC")


@meta(owner="t@example.com")
@source(Webhook(name="hook").endpoint("ev"), disorder="14d", cdc="append",
        since=T0.to_pydatetime(), until=(T0 + pd.Timedelta(hours=2)).to_pydatetime())  # fmt: skip
@dataset
class Ranged:
    n: int
    ts: datetime


def test_since_and_until_keep_the_same_rows_on_the_mock_and_the_engine() -> None:
    offsets = [-3600, -1, 0, 1, 3600, 7199, 7200, 7201, 86400]
    rows = [{"n": i, "ts": (T0 + pd.Timedelta(seconds=s)).isoformat()}
            for i, s in enumerate(offsets)]  # fmt: skip

    client = MockClient()
    client.commit("c", datasets=[Ranged])
    client.log("hook", "ev", pd.DataFrame(rows))
    on_mock = sorted(client.get_dataset_df("Ranged")["n"].tolist())

    jobs = jobs_of(compile_blueprints(EntityGraph.build(commit_spec("c", [Ranged], []))))
    job = SourceJob(next(j for j in jobs if isinstance(j, plan.SourceJobSpec)), 1)
    msgs = [InMessage("ev", 0, i, None, json.dumps(r).encode()) for i, r in enumerate(rows)]
    it = job._row_by_row(msgs, MemoryState(), None)  # noqa: SLF001
    on_engine = sorted(r["n"] for o in it.outputs for r in rows_of(o.value))

    assert on_mock == on_engine == [2, 3, 4, 5]  # 0 s, 1 s, 1 h, 7199 s: within [since, until)
    assert not it.errors  # outside the range is not an error
