"""Quix Streams, the streaming benchmark's peer, in constructs that compute a per-key 1 h
Count + Sum of ``amount`` over the bench events. Runs in Quix's own venv
(``bench/quix_env.sh``): standard library and quixstreams only.

``python bench/stream_quix.py CONSTRUCT GUARANTEE COMMIT_S SRC OUT GROUP N`` consumes N
events of SRC, writes one record per event to OUT, then prints one JSON line: wall and CPU
seconds (start-up included: Quix has no hook after its consumer is assigned).

Constructs, so the peer is not set up to lose:

- ``sliding``: ``sliding_window(1 h).agg(Sum, Count).current()``, the construct closest to our
  ``Continuous("1h")``; Quix's docs say dense streams should prefer tumbling/hopping windows.
- ``tumbling``: ``tumbling_window(1 h).agg(Sum, Count).current()``, its fastest window
  (a different answer: the count since the hour began, not over the last hour).
- ``state``: the same answer as ``Continuous("1h")`` (every event in [t - 1 h, t]) kept by
  hand in Quix ``State``: each key's recent (ts, amount) pairs, pruned past the window.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from datetime import datetime
from typing import Any

HOUR_MS = 3_600_000
GRACE_MS = 3_600_000  # the disorder each construct accepts (the events jitter by 2 s)


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def ts_of(value: Any, headers: Any, timestamp: Any, timestamp_type: Any) -> int:
    return int(datetime.fromisoformat(value["ts"]).timestamp() * 1000)


def hand_kept(value: dict[str, Any], key: Any, ts: int, headers: Any, state: Any) -> dict:
    """Count and sum of the key's events in [ts - 1 h, ts], as our continuous window."""
    recent: list[list[float]] = state.get("recent", [])
    recent.append([ts, value["amount"]])
    newest = max(state.get("newest", ts), ts)
    keep = newest - HOUR_MS - GRACE_MS
    if recent[0][0] < keep:
        recent = [e for e in recent if e[0] >= keep]
    state.set("recent", recent)
    state.set("newest", newest)
    low = ts - HOUR_MS
    inside = [a for t, a in recent if low <= t <= ts]
    return {"uid": value["uid"], "ts": value["ts"], "n": len(inside), "total": sum(inside)}


def run(construct: str, guarantee: str, commit_s: float, src: str, out: str, group: str,
        n: int) -> None:  # fmt: skip
    from quixstreams import Application
    from quixstreams.dataframe.windows import Count, Sum

    app = Application(
        broker_address=os.environ["BENCH_KAFKA"], consumer_group=group,
        auto_offset_reset="earliest", processing_guarantee=guarantee,
        state_dir=f"/tmp/quix-state-{group}", commit_interval=commit_s, loglevel="WARNING",
    )  # fmt: skip
    topic = app.topic(src, value_deserializer="json", timestamp_extractor=ts_of)
    out_topic = app.topic(out, value_serializer="json", key_serializer="json")
    sdf = app.dataframe(topic).group_by("uid")
    if construct == "sliding":
        sdf = sdf.sliding_window(duration_ms=HOUR_MS, grace_ms=GRACE_MS).agg(
            total=Sum("amount"), n=Count()
        ).current()  # fmt: skip
    elif construct == "tumbling":
        sdf = sdf.tumbling_window(duration_ms=HOUR_MS, grace_ms=GRACE_MS).agg(
            total=Sum("amount"), n=Count()
        ).current()  # fmt: skip
    elif construct == "state":
        sdf = sdf.apply(hand_kept, stateful=True, metadata=True)
    else:
        raise SystemExit(f"unknown construct {construct!r}: sliding, tumbling or state")
    sdf.to_topic(out_topic)
    t0 = time.monotonic()
    app.run(count=n, timeout=900, collect=False)
    print(json.dumps({"wall": time.monotonic() - t0, "cpu": _cpu()}))


if __name__ == "__main__":
    construct, guarantee, commit_s, src, out, group, n = sys.argv[1:8]
    run(construct, guarantee, float(commit_s), src, out, group, int(n))
