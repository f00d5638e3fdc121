"""A client reads its branch's jobs on every lookup; the specs it decoded before are kept by
their text, so each is decoded once, and a commit that changes the jobs is seen at once."""

from __future__ import annotations

import pytest

from fennel_dagster.metadata import registry
from fennel_dagster.metadata.db import connect
from fennel_dagster.settings import Settings
from tests.engine import repo
from tests.engine.harness import commit, create_topic

pytestmark = pytest.mark.services


def test_jobs_read_with_the_cache_equal_those_read_without(engine_settings: Settings) -> None:
    s = engine_settings.with_(partitions=1)
    topic = f"{s.namespace}.raw"
    create_topic(s, topic, 1)
    commit(s, repo.graph(topic))
    decoded: dict[tuple[str, str], registry.JobRow] = {}
    with connect(s, s.pg_schema) as conn:
        first = registry.branch_jobs(conn, "main", decoded)
        assert first == registry.branch_jobs(conn, "main")
        kept = dict(decoded)
        assert len(kept) == len(first) > 0
        again = registry.branch_jobs(conn, "main", decoded)
        assert again == first and all(a is b for a, b in zip(again, first, strict=True))
        assert decoded == kept  # nothing decoded twice

    commit(s, repo.graph(topic, spend_version=2))  # Spend's jobs are replaced
    with connect(s, s.pg_schema) as conn:
        after = registry.branch_jobs(conn, "main", decoded)
        assert after == registry.branch_jobs(conn, "main")
    assert {j.hash for j in after} != {j.hash for j in first}
