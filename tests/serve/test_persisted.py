"""The persisted-query store's rules (Apollo's APQ protocol), without a server."""

from __future__ import annotations

import hashlib

import pytest

from fennel_dagster.serve.frames import BadRequest
from fennel_dagster.serve.persisted import PersistedQueries, PersistedQueryNotFound


def _ext(doc: str, version: int = 1) -> dict:
    return {
        "persistedQuery": {
            "version": version,
            "sha256Hash": hashlib.sha256(doc.encode()).hexdigest(),
        }
    }


def test_a_document_is_kept_by_its_hash_and_the_least_recently_used_goes_first() -> None:
    store = PersistedQueries(capacity=2)
    a, b, c = "{ a }", "{ b }", "{ c }"
    assert store.document(a, None) == a  # no extension: the query as sent, nothing kept
    assert len(store) == 0
    with pytest.raises(PersistedQueryNotFound):
        store.document(None, _ext(a))
    assert store.document(a, _ext(a)) == a
    assert store.document(b, _ext(b)) == b
    assert store.document(None, _ext(a)) == a  # a is now the most recently used
    assert store.document(c, _ext(c)) == c  # evicts b
    assert store.document(None, _ext(a)) == a
    with pytest.raises(PersistedQueryNotFound):
        store.document(None, _ext(b))


def test_a_hash_that_does_not_match_or_an_unknown_version_is_refused_by_name() -> None:
    store = PersistedQueries()
    with pytest.raises(BadRequest, match="does not match"):
        store.document("{ a }", _ext("{ b }"))
    with pytest.raises(BadRequest, match="version"):
        store.document("{ a }", _ext("{ a }", version=2))
    with pytest.raises(BadRequest, match="64 characters"):
        store.document(None, {"persistedQuery": {"version": 1, "sha256Hash": "abc"}})
    assert len(store) == 0
    big = "{ a }" + " " * 200
    assert PersistedQueries(max_chars=100).document(big, _ext(big)) == big  # not kept
