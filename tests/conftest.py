"""Shared fixtures: the real local stack, started once per session when a test needs it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from fennel_dagster import stack
from fennel_dagster.settings import Settings, get_settings


@pytest.fixture(scope="session")
def settings() -> Settings:
    return get_settings()


@pytest.fixture(scope="session")
def live_stack(settings: Settings) -> Settings:
    """The stack's services, up and healthy (``stack up`` is idempotent)."""
    results = stack.up(settings)
    down = [r for r in results if not r.health.ok]
    assert not down, f"stack services not healthy: {[r.line() for r in down]}"
    return settings


@pytest.fixture(autouse=True)
def _services_marker_needs_stack(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("services") is not None:
        request.getfixturevalue("live_stack")


@pytest.fixture
def unique_name() -> str:
    """A name no other test uses: for topics, groups, prefixes, schemas."""
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def spark(live_stack: Settings) -> Iterator[object]:
    """One Spark session for the whole suite: a JVM start costs seconds."""
    from fennel_dagster.batch.spark import spark_session

    session = spark_session(live_stack, app="fennel-dagster-tests")
    yield session
    session.stop()


@pytest.fixture
def kafka_admin(live_stack: Settings) -> Iterator[object]:
    from confluent_kafka.admin import AdminClient

    yield AdminClient({"bootstrap.servers": live_stack.kafka_servers})
