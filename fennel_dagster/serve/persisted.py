"""Automatic persisted queries (Apollo's APQ protocol) for the GraphQL endpoint.

A client sends ``extensions.persistedQuery = {"version": 1, "sha256Hash": h}`` instead of the
document; a server that knows ``h`` runs the document it stands for, one that does not answers
``PersistedQueryNotFound`` and the client sends the document once more with its hash, which the
server checks and keeps. Requests then carry a hash of 64 characters, whatever the document's
size, and a kept document's parse and validation are already cached. Each server process keeps
its own bounded set: several servers behind a load balancer each learn a document on first use,
as the protocol expects.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from threading import Lock
from typing import Any

from fennel_dagster.errors import QueryError
from fennel_dagster.serve.frames import BadRequest

NOT_FOUND = "PersistedQueryNotFound"
NOT_FOUND_CODE = "PERSISTED_QUERY_NOT_FOUND"


class PersistedQueryNotFound(QueryError, LookupError):
    """The hash is not known here: the client sends the document with it (answered 200 with
    the protocol's error, as Apollo servers do)."""


class PersistedQueries:
    """Documents by the SHA-256 of their text, the least recently used dropped past
    ``capacity``."""

    def __init__(self, capacity: int = 10_000, max_chars: int = 100_000) -> None:
        self.capacity, self.max_chars = capacity, max_chars
        self._docs: OrderedDict[str, str] = OrderedDict()
        self._lock = Lock()

    def document(self, query: Any, extensions: Any) -> Any:
        """The request's document: ``query`` itself, or the one its persisted-query hash
        names (kept now if both are given)."""
        if not isinstance(extensions, dict) or "persistedQuery" not in extensions:
            return query
        pq = extensions["persistedQuery"]
        if not isinstance(pq, dict) or pq.get("version") != 1:
            raise BadRequest(
                'extensions.persistedQuery: unsupported version; send {"version": 1, '
                '"sha256Hash": <hex SHA-256 of the query text>}'
            )
        digest = pq.get("sha256Hash")
        if not isinstance(digest, str) or len(digest) != 64:
            raise BadRequest(
                "extensions.persistedQuery.sha256Hash: the hex SHA-256 of the query text "
                "(64 characters) is required"
            )
        digest = digest.lower()
        if query is None:
            with self._lock:
                found = self._docs.get(digest)
                if found is not None:
                    self._docs.move_to_end(digest)
            if found is None:
                raise PersistedQueryNotFound(digest)
            return found
        if not isinstance(query, str) or len(query) > self.max_chars:
            return query  # the endpoint's own checks name what is wrong with it
        if hashlib.sha256(query.encode()).hexdigest() != digest:
            raise BadRequest(
                "extensions.persistedQuery.sha256Hash: does not match the query's SHA-256; "
                "hash the exact query text (UTF-8)"
            )
        with self._lock:
            self._docs[digest] = query
            self._docs.move_to_end(digest)
            while len(self._docs) > self.capacity:
                self._docs.popitem(last=False)
        return query

    def __len__(self) -> int:
        return len(self._docs)


def not_found_body() -> dict[str, Any]:
    return {"errors": [{"message": NOT_FOUND, "extensions": {"code": NOT_FOUND_CODE}}]}
