"""Clients of the platform: ``Client`` over HTTP to a query server (what user code holds: a
URL and a token), and ``LocalClient``, the platform driven in process by its own parts."""

from fennel_dagster.client.http import Client
from fennel_dagster.client.local import LocalClient

__all__ = ["Client", "LocalClient"]
