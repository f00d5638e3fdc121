"""Keeping garbage-collection pauses out of serving latency, and its cost out of the
engine's hot path."""

from __future__ import annotations

import gc


def freeze_startup_heap() -> None:
    """Collect once, then hide every object alive now (modules, schemas, compiled code) from
    the collector (``gc.freeze``). A full collection of a serving process otherwise walks all
    of them, ~160k objects and ~55 ms here: a pause that lands on whichever request or
    lookup is running. Call it when start-up is done, before serving."""
    gc.collect()
    gc.freeze()


def freeze_built() -> None:
    """``gc.freeze()`` without the collection, for what a serving process builds to keep
    after start-up (a branch's graph on reload, a GraphQL schema): else each full collection
    walks it again, a 55 ms pause in the query server here (measured by a collector callback
    under load). Cyclic garbage alive at that moment stays: a small price, as reloads are
    rare; a collection now would be the very pause this avoids."""
    gc.freeze()


# A runner's batch makes some 10^5 short-lived containers (key tuples, entry lists, frames),
# nearly all freed by reference counting. At CPython's default first threshold (700) they
# set off about 2,400 collections per 600k events of a live-shaped pipeline in process,
# 0.8 s: 10-20% of the source and pipeline jobs' CPU. Every 50,000: 3 collections, 40-60 ms.
RUNNER_GC_THRESHOLDS = (50_000, 20, 20)


def collect_less_often() -> None:
    """For a process that runs jobs (``RUNNER_GC_THRESHOLDS``): cyclic garbage is still
    collected, after 50,000 net allocations instead of 700."""
    gc.set_threshold(*RUNNER_GC_THRESHOLDS)
