"""A process that runs jobs collects cyclic garbage less often (``heap.collect_less_often``):
its batches free nearly everything by reference counting, and the default thresholds cost
10-20% of a job's CPU in collections (bench/README.md)."""

from __future__ import annotations

import gc
import weakref

from fennel_dagster.heap import RUNNER_GC_THRESHOLDS, collect_less_often


def test_a_runner_collects_after_fifty_thousand_allocations_and_still_collects_cycles() -> None:
    before = gc.get_threshold()
    try:
        collect_less_often()
        assert gc.get_threshold() == RUNNER_GC_THRESHOLDS
        assert RUNNER_GC_THRESHOLDS[0] > before[0]

        class Node:
            pass

        a, b = Node(), Node()
        a.other, b.other = b, a  # type: ignore[attr-defined]
        gone = weakref.ref(a)
        del a, b  # a cycle: reference counting alone never frees it
        kept = [[i] for i in range(RUNNER_GC_THRESHOLDS[0] * 2)]  # net allocations
        assert gone() is None, "no automatic collection after the threshold's allocations"
        del kept
    finally:
        gc.set_threshold(*before)
