"""Every client is a ``FennelClient`` (``api``): ``MockClient``, ``LocalClient`` and the HTTP
``Client`` answer Fennel's client calls with the same parameters and return types. mypy checks
the assignment below; tests/client/test_conformance.py checks their answers agree."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fennel_dagster.api import FennelClient, Response

if TYPE_CHECKING:
    from fennel_dagster.client import Client, LocalClient
    from fennel_dagster.mock import MockClient

    def _every_client_is_a_fennel_client(
        mock: MockClient, local: LocalClient, http: Client
    ) -> tuple[FennelClient, FennelClient, FennelClient]:
        return mock, local, http


__all__ = ["FennelClient", "Response"]
