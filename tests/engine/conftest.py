"""Engine fixtures: a metadata schema, topic namespace and state directory of the test's own."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from fennel_dagster.settings import Settings
from tests.platform import drop_platform


@pytest.fixture
def engine_settings(live_stack: Settings, tmp_path: Path) -> Iterator[Settings]:
    name = f"e{uuid.uuid4().hex[:10]}"
    s = live_stack.with_(
        pg_schema=name,
        namespace=name,
        state_dir=tmp_path / "state",
        engine_snapshot_interval_s=1.0,
        engine_txn_interval_ms=50,
        engine_poll_interval_s=0.5,
        engine_lease_s=3.0,
    )
    yield s
    drop_platform(s)
