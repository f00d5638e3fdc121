"""Unit-test feature repos without services: the MockClient runs the engine's operators in-process."""

from fennel_dagster.mock.client import MockClient, log, mock

__all__ = ["MockClient", "log", "mock"]
