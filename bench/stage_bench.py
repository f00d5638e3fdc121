"""CPU per event of the source job and the pipeline job, in one process, without Kafka.

The stream bench times the whole engine; a drain there lasts about 2 s and moves by a third
from run to run. This feeds the keyless repo's two jobs (``bench/stream_repos.py``) the
batches a runner would give them, in one process, and counts each job's CPU per event (its
``process`` plus the RocksDB write of its state), so a change to either shows apart from
Kafka, the broker and the machine's other tenants:

- ``--shape drain``: the stream bench's events (100 ms apart, +-2 s of disorder, 1,000 keys)
  in source batches of 5,000 and pipeline batches of four of them, as a backlog arrives;
- ``--shape live``: events stamped in order at 28k a second, source batches of 2,000 and
  pipeline batches of three, as under the stream bench's live load;
- ``--shape steady``: the live load on state that already holds an hour of events (each
  key one every 30 s, fed first and not counted), as a long-running engine's is: each key's
  window then covers a full hour of tiles, which the other shapes' keys never reach.

One partition, as in the stream bench: every row stays in its job partition. The first
third of the rounds warms up and is not counted. The collector runs at the runners'
thresholds (``heap.RUNNER_GC_THRESHOLDS``) when this checkout has them. To compare with
another revision, run this file with that checkout first on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import importlib.util
import json
import random
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from fennel_dagster import commit_spec
from fennel_dagster.commit.compiler import compile_blueprints, jobs_of
from fennel_dagster.commit.graph import EntityGraph
from fennel_dagster.engine.hangar import Hangar
from fennel_dagster.engine.jobs.pipeline import PipelineJob
from fennel_dagster.engine.jobs.source import SourceJob
from fennel_dagster.engine.messages import InMessage
from fennel_dagster.ops.state import OverlayReader, WriteBatch
from fennel_dagster.wire import plan

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SHAPES = {  # seconds between events, disorder (ms), events per source batch, source batches
    "drain": (0.1, 2000, 5000, 4),  # per pipeline batch
    "live": (1 / 28000, 0, 2000, 3),
    "steady": (1 / 28000, 0, 2000, 3),
}
HISTORY = {"steady": 3600}  # seconds of events held before the counted load (30 s a key)


def _repos() -> object:
    path = Path(__file__).with_name("stream_repos.py")
    spec = importlib.util.spec_from_file_location("stream_repos", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["stream_repos"] = mod  # its declarations resolve their annotations there
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", choices=sorted(SHAPES), default="drain")
    ap.add_argument("--rounds", type=int, default=30, help="pipeline batches (a third warm up)")
    ap.add_argument("--keys", type=int, default=1000)
    args = ap.parse_args()
    try:
        from fennel_dagster.heap import RUNNER_GC_THRESHOLDS

        gc.set_threshold(*RUNNER_GC_THRESHOLDS)
    except ImportError:  # a revision from before it: the default thresholds
        pass
    step, disorder_ms, per, group = SHAPES[args.shape]
    repo = _repos().REPOS["keyless"]("ext")  # type: ignore[attr-defined]
    jobs = jobs_of(compile_blueprints(EntityGraph.build(commit_spec("bench", repo, []))))
    source = SourceJob(next(j for j in jobs if isinstance(j, plan.SourceJobSpec)), 1)
    spec = next(j for j in jobs if isinstance(j, plan.PipelineJobSpec))
    pipeline = PipelineJob(dataclasses.replace(spec, partitions=1))
    scratch = Path(tempfile.mkdtemp(prefix="fd-stage-"))
    source_state, state = Hangar(scratch / "source"), Hangar(scratch / "pipeline")
    rnd, t = random.Random(1), 0.0
    offsets = {"in": 0, "out": 0}
    cpu = {"source": 0.0, "pipeline": 0.0}

    def feed(events: list[bytes], counted: bool) -> None:
        """One pipeline batch: the source's batches of ``per`` events, then the pipeline."""
        outputs = []
        for at in range(0, len(events), per):
            values = events[at : at + per]
            msgs = [InMessage("ext", 0, offsets["in"] + i, None, v) for i, v in enumerate(values)]
            offsets["in"] += len(values)
            c0 = time.process_time()
            it = source.process(msgs, source_state)
            if it.writes is not None and len(it.writes):
                source_state.apply(it.writes)
            if counted:
                cpu["source"] += time.process_time() - c0
            outputs += it.outputs
        batch = [InMessage(o.topic, 0, offsets["out"] + i, o.key, o.value)
                 for i, o in enumerate(outputs)]  # fmt: skip
        offsets["out"] += len(batch)
        c0 = time.process_time()
        done = pipeline.process(batch, OverlayReader(state, WriteBatch()))
        state.apply(done.writes)
        if counted:
            cpu["pipeline"] += time.process_time() - c0

    def event(uid: int, at: datetime) -> bytes:
        return json.dumps({"uid": uid, "amount": 1.0, "ts": at.isoformat()}).encode()

    history = HISTORY.get(args.shape, 0)
    held = sorted(
        (T0 - timedelta(seconds=history - s - rnd.uniform(0, 30)), uid)
        for s in range(0, history, 30)
        for uid in range(args.keys)
    )
    for at in range(0, len(held), per * group):
        feed([event(uid, ts) for ts, uid in held[at : at + per * group]], counted=False)
    counted = 0
    for r in range(args.rounds):
        values = []
        for _ in range(per * group):
            t += step
            ts = T0 + timedelta(seconds=t, milliseconds=rnd.randint(-disorder_ms, disorder_ms))
            values.append(event(rnd.randrange(args.keys), ts))
        feed(values, counted=r >= args.rounds // 3)
        if r >= args.rounds // 3:
            counted += per * group
    print(f"{args.shape}: {counted:,} events counted; CPU per event: "
          f"source {cpu['source'] / counted * 1e6:.2f} us, "
          f"pipeline {cpu['pipeline'] / counted * 1e6:.2f} us")  # fmt: skip


if __name__ == "__main__":
    main()
