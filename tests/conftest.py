"""Shared fixtures: the real local stack, started once per session when a test needs it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

from fennel_dagster import stack
from fennel_dagster.settings import Settings, get_settings

# Two workers, the stack and its engines share the machine's cores: a per-example time limit
# would measure the machine, not the code under test.
hypothesis_settings.register_profile(
    "suite", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
hypothesis_settings.load_profile("suite")


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


# With `-n 2 --dist loadscope` (README: running the suite in two workers) a scope here
# (a unit of work that runs on one worker, in order) is `_unit`'s: a test file, so its module
# fixtures are built once; a package whose files share package fixtures or a port (serve: one
# engine and query server; dagster: one `dg dev`); and the files that run Dagster's webserver
# and daemon, which take both cores while they start: two at once miss their deadlines, so
# they take turns on one worker. The two longest units go first, one to each worker, so
# neither is left running alone at the end.
_DAGSTER_DEV = "dagster processes"
_UNITS = {
    "tests/stack/test_demo.py": _DAGSTER_DEV,
    "tests/engine/test_dagster_runs.py": _DAGSTER_DEV,
    "tests/dagster/": _DAGSTER_DEV,
    "tests/stack/test_dev.py": _DAGSTER_DEV,
    "tests/serve/": "tests/serve",
}


def _unit(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    return next((u for p, u in _UNITS.items() if path.startswith(p)), path)


_FIRST = (_DAGSTER_DEV, "tests/serve")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        unit = _unit(item.nodeid)
        return _FIRST.index(unit) if unit in _FIRST else len(_FIRST)

    if hasattr(config, "workerinput"):  # an xdist worker; a serial run keeps the files' order
        items.sort(key=rank)  # stable: files keep their order, and tests theirs within a file


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """xdist's own ``loadgroup`` marks node ids, which pytest 9 no longer lets a plugin
    rename; its ``loadscope`` scheduler with our units as scopes does the same."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByUnit(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _unit(nodeid)

    return ByUnit(config, log)
