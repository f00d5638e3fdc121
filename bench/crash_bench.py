"""Crash recovery of runners: how long an event waits when every runner of a live engine is
SIGKILLed the moment it is produced.

``python -m bench.crash_bench --baseline REV`` against the local stack. For this commit's
engine and REV's (a git worktree on this venv, as in ``bench/stream_bench.py``), one after
another in one run: the keyless repo of ``bench/stream_repos.py`` (source -> Count + Sum
whose state serves lookups, offline writers), a producer sending ``--rate`` events/s
stamped now, then ``--kills`` rounds of: wait ``--pause`` s, SIGKILL every runner process
(the leaves of the engine's process tree), produce a probe event at once and time it until
a lookup sees it. The same probe without a kill is each engine's undisturbed freshness.
The supervisor restarts the runners; exactly-once is the tests' business, this is the
wait a crash costs.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.stream_bench import T0, Engine, baseline_checkout, commit_repo, pct, probe
from fennel_dagster.client import LocalClient
from fennel_dagster.settings import Settings, get_settings
from fennel_dagster.stack import proctree

ROOT = Path(__file__).resolve().parents[1]


def runner_pids(root: int) -> list[int]:
    """Runner processes under an engine: the leaves of its process tree, less
    multiprocessing's own helpers (the resource tracker, a fork server between runners)."""
    procs = proctree.table()
    tree = proctree.descendants(root, procs)
    parents = {procs[p].ppid for p in tree if p in procs}
    out = []
    for p in tree:
        cmd = proctree.cmdline(p)
        server = p in procs and procs[p].ppid == root and b"forkserver" in cmd  # no runner yet
        if p not in parents and cmd and b"resource_tracker" not in cmd and not server:
            out.append(p)
    return out


def steady_load(s: Settings, topic: str, rate: float, stop: threading.Event) -> None:
    p = Producer({"bootstrap.servers": s.kafka_servers, "linger.ms": 5})
    rnd, i, t0 = random.Random(7), 0, time.monotonic()
    while not stop.is_set():
        due = int((time.monotonic() - t0) * rate)
        now = datetime.now(UTC).isoformat()
        while i < due:
            p.produce(topic, json.dumps({"uid": rnd.randrange(1000), "amount": 1.0,
                                         "ts": now}).encode())  # fmt: skip
            i += 1
        p.poll(0)
        time.sleep(0.01)
    p.flush(30)


def one_engine(
    s: Settings, tag: str, code: Path | None, args: argparse.Namespace, first_uid: int
) -> dict[str, Any]:
    topic = f"{s.namespace}.{tag}"
    admin = AdminClient({"bootstrap.servers": s.kafka_servers})
    for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        f.result(30)
    ss = s.with_(pg_schema=f"{s.pg_schema}{tag}", namespace=f"{s.namespace}{tag}")
    commit_repo(ss, "keyless", topic, code)
    client = LocalClient(ss)
    engine = Engine(ss, code)
    engine.start()
    stop = threading.Event()
    load = threading.Thread(target=steady_load, args=(ss, topic, args.rate, stop), daemon=True)
    try:
        probe(ss, client, topic, first_uid, timeout=300, at=T0 - timedelta(minutes=1))
        load.start()
        uid = first_uid + 1
        calm: list[float] = []
        for _ in range(args.kills):
            time.sleep(args.pause)
            calm.append(probe(ss, client, topic, uid))
            uid += 1
        crashed: list[float] = []
        killed = 0
        assert engine.proc is not None
        for _ in range(args.kills):
            time.sleep(args.pause)
            pids = runner_pids(engine.proc.pid)
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
                except ProcessLookupError:
                    pass
            crashed.append(probe(ss, client, topic, uid, timeout=300))
            uid += 1
        return {"calm": calm, "crashed": crashed, "killed": killed}
    finally:
        stop.set()
        if load.is_alive():
            load.join(60)
        engine.stop()
        client.close()


def report(args: argparse.Namespace, rows: dict[str, dict[str, Any]]) -> str:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    lines = [
        "# Runner crash recovery: an event produced as every runner is SIGKILLed",
        "",
        f"`python -m bench.crash_bench --baseline {args.baseline} --kills {args.kills} "
        f"--pause {args.pause:g} --rate {args.rate:g}` at {head} "
        f"({datetime.now(UTC):%Y-%m-%d %H:%M} UTC), one run, the engines one after another "
        f"on this machine ({os.cpu_count()} cores). Keyless repo (source -> Count + Sum whose "
        f"state serves lookups, offline writers), {args.rate:g} events/s of steady load.",
        "Each round: wait, SIGKILL every runner process of the engine, produce a probe event at "
        "once, time it until a lookup sees it. *Calm*: the same probe with no kill.",
        "",
        "| engine | runners killed | calm p50 s | crashed p50 s | crashed p90 s | crashed max s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, r in rows.items():
        lines.append(
            f"| {name} | {r['killed']} | {statistics.median(r['calm']):.2f} | "
            f"{statistics.median(r['crashed']):.2f} | {pct(r['crashed'], 0.9):.2f} | "
            f"{max(r['crashed']):.2f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", required=True, help="the git revision to compare with")
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--pause", type=float, default=4.0, help="seconds between rounds")
    ap.add_argument("--rate", type=float, default=200.0, help="steady load, events/s")
    args = ap.parse_args()
    name = f"k{uuid.uuid4().hex[:8]}"
    s = get_settings().with_(pg_schema=name, namespace=name, partitions=1,
                             state_dir=Path(tempfile.mkdtemp(prefix="fd-crash-")))  # fmt: skip
    old = baseline_checkout(args.baseline)
    rows: dict[str, dict[str, Any]] = {}
    try:
        rows["this commit"] = one_engine(s, "new", None, args, 40_000_000)
        rows[args.baseline] = one_engine(s, "old", old, args, 41_000_000)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, check=False)
    text = report(args, rows)
    print(text)
    (ROOT / "bench" / "results" / "crash.md").write_text(text)


if __name__ == "__main__":
    main()
