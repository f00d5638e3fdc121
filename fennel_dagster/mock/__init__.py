"""Unit-test feature repos without services: the MockClient runs the engine's operators in-process."""

from fennel_dagster.mock.client import MockClient, almost_equal, log, mock

__all__ = ["MockClient", "almost_equal", "log", "mock"]
