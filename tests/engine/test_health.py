"""Stream health (what the `stream_health` sensor observes) read from the real broker."""

from __future__ import annotations

import pytest

from fennel_dagster.engine.health import dataset_health
from fennel_dagster.ops.rows import to_records
from fennel_dagster.settings import Settings
from tests.engine import repo
from tests.engine.harness import Fleet, commit, produce_rows, read_topic, wait_for

pytestmark = pytest.mark.services


def test_health_reports_rows_lag_errors_and_the_newest_event(engine_settings: Settings) -> None:
    s = engine_settings
    jobs = commit(s, repo.graph(f"{s.namespace}.raw"))
    pipe = jobs["pipeline:Spend"]
    txn_topic, spend_topic = pipe.spec.inputs[0].topic, pipe.spec.output_topic
    ev = repo.events(40)
    produce_rows(s, txn_topic, to_records(ev))
    before = dataset_health(s.kafka_servers, spend_topic, pipe.spec.error_topic, [pipe], "ts")
    assert before.lag == 40 and before.messages == 0 and before.errors == 0
    assert before.last_event is None
    fleet = Fleet(s)
    fleet.start(pipe)
    try:
        wait_for(lambda: len(read_topic(s, spend_topic, 4, timeout=5)) >= 40, 90, "outputs")
    finally:
        fleet.stop()
    after = dataset_health(s.kafka_servers, spend_topic, pipe.spec.error_topic, [pipe], "ts")
    assert after.lag == 0 and after.messages >= 40 and after.errors == 0
    assert after.last_event is not None and after.last_event.startswith("2026-01-01")
