"""Clients of the platform: ``Client`` over HTTP to a query server (what user code holds: a
URL and a token), and ``LocalClient``, the platform driven in process by its own parts. Both,
and ``MockClient``, implement ``FennelClient`` and answer with ``Response``s."""

from fennel_dagster.api import FennelClient, Response, ResponseError
from fennel_dagster.client.http import Client
from fennel_dagster.client.local import LocalClient

__all__ = ["Client", "FennelClient", "LocalClient", "Response", "ResponseError"]
