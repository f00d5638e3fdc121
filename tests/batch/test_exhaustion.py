"""``@source(bounded=True, idleness=...)``: a bounded Postgres or S3 source is polled no more
once no poll has found anything new for ``idleness`` (Fennel's "assumed to have exhausted");
elsewhere it is refused at commit, and Fennel's declaration rules hold."""

from __future__ import annotations

from datetime import datetime
from types import SimpleNamespace
from typing import Any

import pytest

from fennel_dagster import commit_spec, dataset, meta, source
from fennel_dagster.batch import pg_ingest, s3_ingest
from fennel_dagster.batch.exhaustion import Exhaustion
from fennel_dagster.commit.errors import CommitRejected
from fennel_dagster.commit.server import DefinitionServer
from fennel_dagster.declare.errors import DeclarationError
from fennel_dagster.mock import MockClient
from fennel_dagster.sources import Postgres, Webhook
from fennel_dagster.wire import spec

WEBHOOK = spec.ConnectorSpec("webhook", "hook", (("endpoint", "e"),))


def _source(bounded: bool, idleness: int | None) -> spec.SourceSpec:
    return spec.SourceSpec(WEBHOOK, every=10, bounded=bounded, idleness=idleness)


def test_only_a_bounded_source_is_exhausted_and_only_after_idleness_without_news() -> None:
    end = Exhaustion(_source(True, 30), now=0.0)
    end.saw(5, now=10.0)
    assert not end.exhausted(39.0)
    end.saw(0, now=39.0)  # nothing new: the clock still runs from 10
    assert end.exhausted(40.0)
    unbounded = Exhaustion(_source(False, None), now=0.0)
    assert not unbounded.exhausted(10**9)


class _Stop:
    """A stop event on a fake clock: ``wait`` moves time on; set after ``polls`` waits."""

    def __init__(self, polls: int) -> None:
        self.now, self.left = 0.0, polls

    def is_set(self) -> bool:
        return self.left <= 0

    def wait(self, seconds: float) -> bool:
        self.now += seconds
        self.left -= 1
        return self.is_set()


def _run(poller: Any, stop: _Stop) -> None:
    poller.run(stop, lambda: None, clock=lambda: stop.now)


def _job(src: spec.SourceSpec) -> Any:
    return SimpleNamespace(source=src, dataset=SimpleNamespace(name="T"))


@pytest.mark.parametrize(("bounded", "expected"), [(True, 4), (False, 20)])
def test_a_postgres_poller_stops_asking_a_bounded_source_after_idleness(
    monkeypatch: pytest.MonkeyPatch, bounded: bool, expected: int
) -> None:
    """Every 10 s; rows on the first two pulls (0 and 10 s), then none at 20 and 30 s: at 40 s
    nothing has come for 30 s, so it is exhausted and pulled no more; an unbounded source is
    pulled every time."""
    pulls: list[float] = []
    stop = _Stop(polls=20)

    def pull(spark: Any, settings: Any, job: Any) -> pg_ingest.PullReport:
        pulls.append(stop.now)
        return pg_ingest.PullReport(rows=3 if len(pulls) <= 2 else 0)

    monkeypatch.setattr(pg_ingest, "pull", pull)
    poller = pg_ingest.PostgresPoller(None, _job(_source(bounded, 30 if bounded else None)), None)  # type: ignore[arg-type]
    _run(poller, stop)
    assert len(pulls) == expected
    assert poller.total.rows == 6


def test_an_s3_poller_stops_listing_a_bounded_source_after_idleness(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lists: list[float] = []
    stop = _Stop(polls=20)

    def list_files(settings: Any, job: Any) -> list[str]:
        lists.append(stop.now)
        return ["f"]

    def ingest(spark: Any, settings: Any, job: Any, files: Any) -> s3_ingest.IngestReport:
        return s3_ingest.IngestReport(files=1 if len(lists) == 1 else 0, rows=4)

    monkeypatch.setattr(s3_ingest, "list_files", list_files)
    monkeypatch.setattr(s3_ingest, "ingest", ingest)
    poller = s3_ingest.S3Poller(None, _job(_source(True, 20)), None)  # type: ignore[arg-type]
    _run(poller, stop)
    assert lists == [0.0, 10.0]  # a new file at 0 s, none at 10 s; at 20 s it is exhausted


def _declared(conn: Any, cdc: str = "append") -> type:
    @meta(owner="t@example.com")
    @source(conn, disorder="1d", cdc=cdc, bounded=True, idleness="1h")
    @dataset
    class Bounded:
        n: int
        ts: datetime

    return Bounded


def test_a_bounded_postgres_source_commits_and_a_bounded_webhook_is_refused_naming_it() -> None:
    pg = Postgres(name="pg", host="localhost", db_name="db").table("t", cursor="ts")
    ok = _declared(pg)
    assert not DefinitionServer().process_spec(commit_spec("c", [ok], []), None).errors
    MockClient().commit("c", datasets=[ok])

    refused = _declared(Webhook(name="hook").endpoint("e"))
    errors = DefinitionServer().process_spec(commit_spec("c", [refused], []), None).errors
    assert [e.entity for e in errors] == ["Bounded"]
    assert "`bounded`" in errors[0].message and "remove bounded=" in errors[0].fix
    with pytest.raises(CommitRejected, match="`bounded`"):
        MockClient().commit("c", datasets=[refused])


def test_fennels_declaration_rules_for_bounded_and_idleness() -> None:
    hook = Webhook(name="hook").endpoint("e")
    with pytest.raises(DeclarationError, match="needs idleness="):
        source(hook, disorder="1d", cdc="append", bounded=True)
    with pytest.raises(DeclarationError, match="bounded=True"):
        source(hook, disorder="1d", cdc="append", idleness="1h")
