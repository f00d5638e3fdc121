"""Runners against the real Kafka and RocksDB: outputs, state and lookups equal the mock's."""

from __future__ import annotations

import pandas as pd
import pytest

from fennel_dagster.engine.hangar import Hangar
from fennel_dagster.engine.lookups import answer, partitions_of
from fennel_dagster.engine.runner import state_path
from fennel_dagster.mock import MockClient
from fennel_dagster.ops.rows import to_records
from fennel_dagster.settings import Settings
from tests.engine import repo
from tests.engine.harness import Fleet, commit, produce_rows, read_topic, wait_for

pytestmark = pytest.mark.services


def test_the_pipeline_runner_produces_and_serves_what_the_mock_computes(
    engine_settings: Settings,
) -> None:
    s = engine_settings
    datasets = repo.graph(f"{s.namespace}.raw")
    jobs = commit(s, datasets)
    pipe = jobs["pipeline:Spend"]
    assert "index:Spend" not in jobs  # its aggregate state serves lookups: nothing reads an index
    ev = repo.events(400)
    produce_rows(s, pipe.spec.inputs[0].topic, to_records(ev))
    fleet = Fleet(s)
    fleet.start(pipe)
    out_topic = pipe.spec.output_topic
    try:
        wait_for(lambda: len(read_topic(s, out_topic, 4, timeout=5)) >= 400, 90, "400 outputs")
    finally:
        fleet.stop()
    outputs = read_topic(s, out_topic, 4)
    assert len(outputs) == 400

    mock = MockClient()
    mock.commit("m", datasets=datasets)
    mock.log(datasets[0], ev)
    keys = pd.DataFrame({"uid": list(range(20))})
    at = pd.Series([repo.T0 + pd.Timedelta(hours=2)] * 20)
    want, want_found = mock.lookup("Spend", keys, at)

    parts = partitions_of(pipe, keys)
    got_rows = []
    for i, part in enumerate(parts):
        with Hangar(state_path(s, "test", pipe.name, part)) as h:
            df, found = answer(h, pipe, keys.iloc[[i]], at.iloc[[i]])
        got_rows.append(df)
        assert bool(found.iloc[0]) == bool(want_found.iloc[i])
    got = pd.concat(got_rows, ignore_index=True)
    pd.testing.assert_frame_equal(
        got[["uid", "total", "n"]].astype(object), want[["uid", "total", "n"]].astype(object)
    )
