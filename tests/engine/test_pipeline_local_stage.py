"""A pipeline job runs stage 2 at once for the rows its repartition would send back to its
own partition: outputs, state and what still crosses the repartition topic equal the route
through the topic, with one partition (every row stays) and with several (some leave)."""

from __future__ import annotations

import dataclasses

import pytest

from fennel_dagster import commit_spec
from fennel_dagster.commit.compiler import compile_blueprints, jobs_of
from fennel_dagster.commit.graph import EntityGraph
from fennel_dagster.engine.jobs.common import partitions_of
from fennel_dagster.engine.jobs.pipeline import PipelineJob
from fennel_dagster.engine.messages import InMessage, Iteration, OutRecord
from fennel_dagster.ops import batches
from fennel_dagster.ops.state import MemoryState
from fennel_dagster.wire import plan
from tests.engine.repo import events, graph


def _job(partitions: int) -> plan.PipelineJobSpec:
    jobs = jobs_of(compile_blueprints(EntityGraph.build(commit_spec("loc", graph("raw"), []))))
    job = next(j for j in jobs if isinstance(j, plan.PipelineJobSpec))
    assert job.repartition is not None, "Txn is keyless: the aggregate needs a repartition"
    return dataclasses.replace(job, partitions=partitions)


def _as_input(records: list[OutRecord]) -> list[InMessage]:
    return [InMessage(r.topic, r.partition, i, None, r.value) for i, r in enumerate(records)]


def _rows(records: list[OutRecord], topic: str) -> list[tuple[int, dict[str, object]]]:
    return [(r.partition, row) for r in records if r.topic == topic
            for row in batches.rows_of(r.value)]  # fmt: skip


def _apply(state: MemoryState, it: Iteration) -> None:
    if it.writes is not None:
        state.apply(it.writes)


@pytest.mark.parametrize("partitions", [1, 2, 3])
def test_rows_of_the_own_partition_skip_the_repartition_topic_and_change_nothing(
    partitions: int,
) -> None:
    spec = _job(partitions)
    rp = spec.repartition
    assert rp is not None
    ev = events(300, keys=20)
    txn = spec.inputs[0]
    message = InMessage(txn.topic, 0, 0, None, batches.encode(ev, txn.dataset.fields))

    # the route before: every row crosses the repartition topic to its key's partition
    want_out: list[tuple[int, dict[str, object]]] = []
    want_state = []
    parts = partitions_of(ev, rp.keys, partitions, 0)
    for p in range(partitions):
        mine = ev[parts == p].reset_index(drop=True)
        state = MemoryState()
        if len(mine):
            msg = InMessage(rp.topic, p, 0, None, batches.encode(mine, rp.schema))
            it = PipelineJob(spec).process([msg], state)
            assert not it.errors
            _apply(state, it)
            want_out += _rows(it.outputs, spec.output_topic)
        want_state.append(state._data)  # noqa: SLF001 - byte for byte

    # now: partition 0 runs its own share at once and sends only the rest
    states = [MemoryState() for _ in range(partitions)]
    first = PipelineJob(spec).process([message], states[0])
    assert not first.errors
    _apply(states[0], first)
    crossing = [r for r in first.outputs if r.topic == rp.topic]
    assert all(r.partition != 0 for r in crossing), "a row of partition 0 crossed the topic"
    assert sum(r.rows for r in crossing) == int((parts != 0).sum())
    got_out = _rows(first.outputs, spec.output_topic)
    for p in range(1, partitions):
        mine = [r for r in crossing if r.partition == p]
        if mine:
            it = PipelineJob(spec).process(_as_input(mine), states[p])
            assert not it.errors
            _apply(states[p], it)
            got_out += _rows(it.outputs, spec.output_topic)

    assert want_out, "no outputs: the test would prove nothing"
    key = lambda r: (r[0], r[1]["uid"], r[1]["ts"])  # noqa: E731
    assert sorted(got_out, key=key) == sorted(want_out, key=key)
    assert [s._data for s in states] == want_state  # noqa: SLF001
