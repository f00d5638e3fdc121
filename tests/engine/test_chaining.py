"""Which source and pipeline partitions an engine fuses (``engine.chaining``), how they are
packed (``sharing``), and how a process runs a chain: pure logic, no services."""

from __future__ import annotations

import multiprocessing
import threading
import time
from datetime import datetime
from typing import Any

import pytest

from fennel_dagster import commit_spec, dataset, field, inputs, meta, pipeline, source
from fennel_dagster.aggregate import Count
from fennel_dagster.commit.compiler import compile_blueprints, job_blueprint, jobs_of
from fennel_dagster.commit.graph import EntityGraph
from fennel_dagster.engine import chaining, sharing
from fennel_dagster.metadata.registry import JobRow, of_spec
from fennel_dagster.sources import Kafka
from fennel_dagster.window import Continuous
from tests.engine.repo import graph

assert job_blueprint  # the blueprint a job row's hash is read from, as the bank stores it


def _rows(datasets: list[Any], partitions: int = 4) -> dict[str, JobRow]:
    """Each compiled job as a registry row, by kind and dataset ("source:Txn")."""
    bps = compile_blueprints(EntityGraph.build(commit_spec("c", datasets)), partitions=partitions)
    jobs = jobs_of(bps)
    return {f"{j.KIND}:{j.dataset.name}": of_spec(f"h-{j.name}", j) for j in jobs}


def _want(rows: dict[str, JobRow]) -> dict[tuple[str, int], JobRow]:
    return {(r.hash, p): r for r in rows.values() for p in range(r.partitions)}


def test_a_keyless_single_source_fuses_with_the_pipeline_that_streams_it() -> None:
    rows = _rows(graph("raw"))
    src, pipe, other = rows["source:Txn"], rows["pipeline:Spend"], rows["offline:Txn"]
    assert chaining.fusable(src.spec, pipe.spec)
    assert not chaining.fusable(src.spec, other.spec) and not chaining.fusable(pipe.spec, src.spec)
    assert chaining.chains(_want(rows)) == {(pipe.hash, p): (src.hash, p) for p in range(4)}
    # only partitions this engine owns both of are chained
    mine = {k: v for k, v in _want(rows).items() if k != (pipe.hash, 2)}
    assert (pipe.hash, 2) not in chaining.chains(mine) and (pipe.hash, 1) in chaining.chains(mine)
    assert chaining.fenced_chains(src, 3, rows.values()) == [chaining.chain_txn_id(src.name, 3)]
    assert chaining.fenced_chains(pipe, 3, rows.values()) == [chaining.chain_txn_id(src.name, 3)]
    assert chaining.fenced_chains(other, 0, rows.values()) == []


def _keyed_or_two_sources(keyed: bool, sources: int) -> list[Any]:
    @meta(owner="chain@example.com")
    @dataset
    class Ev:
        uid: int = field(key=keyed)  # type: ignore[assignment]
        ts: datetime

    for i in range(sources):
        Ev = source(Kafka(name="k").topic(f"raw{i}"), disorder="1h", cdc="upsert" if keyed
                    else "append")(Ev)  # type: ignore[misc]  # fmt: skip

    @meta(owner="chain@example.com")
    @dataset(index=True)
    class Counted:
        uid: int = field(key=True)
        n: int
        ts: datetime

        @pipeline
        @inputs(Ev)
        def counted(cls, ev):
            return ev.groupby("uid").aggregate(n=Count(window=Continuous("forever")))

    return [Ev, Counted]


@pytest.mark.parametrize(("keyed", "sources"), [(True, 1), (False, 2)])
def test_a_source_that_is_not_its_topics_only_writer_by_partition_is_not_fused(
    keyed: bool, sources: int
) -> None:
    """Keyed rows go to their key's partition, and two sources both write partition p: the
    pipeline's partition p is not the rows of one source partition."""
    rows = _rows(_keyed_or_two_sources(keyed, sources))
    srcs = [r for k, r in rows.items() if k.startswith("source:")]
    assert srcs and not any(chaining.fusable(s.spec, rows["pipeline:Counted"].spec) for s in srcs)
    # with one partition, a keyed source's rows all stay in it: fused
    one = _rows(_keyed_or_two_sources(True, 1), partitions=1)
    assert chaining.fusable(one["source:Ev"].spec, one["pipeline:Counted"].spec)


def test_a_chain_is_packed_as_one_thread_with_its_source() -> None:
    rows = _rows(graph("raw"))
    want = _want(rows)
    chains = chaining.chains(want)
    # by default (a process a partition) each chain is a process of its own
    groups = sharing.plan_groups(want, [], 8, 1, chains)
    src, pipe = rows["source:Txn"], rows["pipeline:Spend"]
    for p in range(4):
        assert tuple(sorted([(pipe.hash, p), (src.hash, p)])) in groups
        group = next(g for g in groups if (src.hash, p) in g)
        assert sharing.chained_in(group, chains) == [((src.hash, p), (pipe.hash, p))]
    # two threads a process: two chains, never two partitions of one job in a group
    two = [g for g in sharing.plan_groups(want, [], 8, 2, chains) if (src.hash, 0) in g
           or (src.hash, 1) in g]  # fmt: skip
    assert len(two) == 2 and all(len(g) == 2 for g in two), two
    sliced = _want({**rows, "index:Other": of_spec("h-idx", rows["pipeline:Spend"].spec)})
    more = sharing.plan_groups(sliced, [], 8, 2, chaining.chains(sliced))
    for g in more:
        assert len({k[0] for k in g}) == len(g), g  # one partition of a job at most
        threads = len(g) - len(sharing.chained_in(g, chains))
        assert threads <= 2 or all(sliced[k].kind not in sharing.STREAM_KINDS for k in g), g
    # a running source alone keeps running alone: its new pipeline is not chained to it
    running = [((src.hash, p),) for p in range(4)]
    later = sharing.plan_groups(want, running, 8, 1, chains)
    assert all(sharing.chained_in(g, chains) == [] for g in later)


def test_a_process_runs_a_chain_in_one_thread_and_its_source_outlives_its_pipeline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[str, str | None]] = []

    def fake(
        settings: Any, job: Any, partition: int, owner: str, stop: threading.Event,
        partner: Any = None,
    ) -> None:  # fmt: skip
        calls.append((job.name, partner.name if partner is not None else None))
        stop.wait(30)

    def until(n: int) -> None:
        deadline = time.monotonic() + 5
        while len(calls) < n and time.monotonic() < deadline:
            time.sleep(0.05)

    rows = _rows(graph("raw"))
    src, pipe, other = rows["source:Txn"], rows["pipeline:Spend"], rows["offline:Txn"]
    monkeypatch.setattr(sharing, "run_forever", fake)
    members = [(src, 0), (pipe, 0), (other, 0)]
    ours, theirs = multiprocessing.Pipe()
    stop = threading.Event()
    chained = [((src.hash, 0), (pipe.hash, 0))]
    group = threading.Thread(target=sharing.run_together,
                             args=(None, members, "o", stop, theirs, chained), daemon=True)  # fmt: skip
    group.start()
    until(2)
    assert sorted(calls, key=str) == sorted([(src.name, pipe.name), (other.name, None)], key=str)
    ours.send(("stop", [(pipe.hash, 0)]))  # the pipeline leaves: the source runs on alone
    until(3)
    assert calls[-1] == (src.name, None) and not ours.poll(0.5) and group.is_alive()
    ours.send(("stop", [(src.hash, 0)]))  # then the source leaves too
    assert ours.poll(5) and ours.recv() == ("ended", (src.hash, 0))
    stop.set()
    group.join(10)
    assert not group.is_alive()


def test_a_fused_pipelines_partitions_are_owned_where_its_sources_are() -> None:
    from types import SimpleNamespace

    from fennel_dagster.engine.supervisor import Supervisor

    rows = _rows(graph("raw"))
    src, pipe = rows["source:Txn"], rows["pipeline:Spend"]
    assert chaining.followed(rows.values()) == {pipe.hash: src.hash}
    engines = ["a", "b", "c"]
    owner: dict[tuple[str, int], str] = {}
    for fuse in (True, False):
        for e in engines:
            me = SimpleNamespace(settings=SimpleNamespace(engine_fuse_sources=fuse), engine_id=e)
            for key in Supervisor.owned(me, list(rows.values()), engines):  # type: ignore[arg-type]
                owner[key] = e
        assert len(owner) == sum(r.partitions for r in rows.values())  # each partition once
        same = [owner[(pipe.hash, p)] == owner[(src.hash, p)] for p in range(4)]
        assert all(same) if fuse else not all(same)  # by their own hashes, they spread
        owner.clear()
