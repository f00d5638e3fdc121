"""Unit-test feature repos without services: the MockClient runs the engine's operators in-process."""

from fennel_dagster.mock.client import InternalTestClient, MockClient, almost_equal, log, mock

__all__ = ["InternalTestClient", "MockClient", "almost_equal", "log", "mock"]
