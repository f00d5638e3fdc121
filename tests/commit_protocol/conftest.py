from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from fennel_dagster.client import LocalClient
from fennel_dagster.metadata.db import connect
from tests.commit_protocol.scenario import settings_for


@pytest.fixture
def schema(live_stack: object) -> Iterator[str]:
    """A metadata schema and topic namespace of this test's own."""
    name = f"t{uuid.uuid4().hex[:10]}"
    yield name
    with LocalClient(settings_for(name)) as client:
        client.recover()
        for branch in client.list_branches():
            client.delete_branch(branch, even_main=True)
    with connect(settings_for(name)) as conn:
        conn.execute(f"DROP SCHEMA {name} CASCADE")
        conn.commit()


@pytest.fixture
def client(schema: str) -> Iterator[LocalClient]:
    with LocalClient(settings_for(schema)) as c:
        yield c
