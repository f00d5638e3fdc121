"""Streaming engine benchmark: our runner vs a bare Kafka transactional pipe vs Quix Streams.

``python -m bench.stream_bench --events 100000 --keys 1000`` against the local stack. Every
contender reads the same pre-produced events (JSON {uid, amount, ts}) from one topic and
runs in processes of its own; throughput is events per CPU-second of the contender's
processes (= events/s per core) and events per wall-second. Our engine runs the whole
path: source job (parse + schema) -> pipeline (repartition by uid, Count + Sum over a 1 h
continuous window, exactly once), whose state serves lookups. Then, with the engine still
running, the event->lookup freshness, and the warm and cold (state deleted, restored from
S3) recovery.

``--baseline REV`` also runs the engine of an earlier commit (a git worktree of REV, same
venv) on the same events, for both repos of ``bench/stream_repos.py``: before/after rows of
one run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from fennel_dagster.client import LocalClient
from fennel_dagster.metadata.db import connect
from fennel_dagster.ops.batches import row_count
from fennel_dagster.settings import Settings, get_settings
from fennel_dagster.stack import proctree

ROOT = Path(__file__).resolve().parents[1]
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def produce_events(s: Settings, topic: str, n: int, keys: int) -> None:
    rnd = random.Random(1)
    p = Producer({"bootstrap.servers": s.kafka_servers, "linger.ms": 20})
    for i in range(n):
        t = T0 + timedelta(milliseconds=100 * i + rnd.randint(-2000, 2000))
        v = {"uid": rnd.randrange(keys), "amount": float(rnd.randint(1, 100)), "ts": t.isoformat()}
        p.produce(topic, json.dumps(v).encode())
        if i % 10000 == 0:
            p.poll(0)
    p.flush(60)


def copy_events(s: Settings, src: str, dst: str, n: int) -> None:
    """The pre-produced events, copied as fast as Kafka takes them (about 1 s per 100k)."""
    c = Consumer({"bootstrap.servers": s.kafka_servers, "group.id": f"copy-{uuid.uuid4().hex}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
    c.assign([TopicPartition(src, 0, 0)])
    p = Producer({"bootstrap.servers": s.kafka_servers, "linger.ms": 20})
    seen = 0
    while seen < n:
        for m in c.consume(10000, 1.0):
            if not m.error():
                p.produce(dst, m.value())
                seen += 1
        p.poll(0)
    p.flush(60)
    c.close()


def count_committed(s: Settings, topic: str, n: int, timeout: float) -> float:
    """Seconds until ``topic`` holds ``n`` committed rows (read_committed; a batch message
    of the engine's internal topics holds many)."""
    c = Consumer({"bootstrap.servers": s.kafka_servers, "group.id": f"count-{uuid.uuid4().hex}",
                  "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})  # fmt: skip
    c.subscribe([topic])
    seen, t0 = 0, time.monotonic()
    while seen < n and time.monotonic() - t0 < timeout:
        seen += sum(row_count(m.value()) for m in c.consume(10000, 0.5) if not m.error())
    c.close()
    if seen < n:
        raise RuntimeError(f"{topic}: only {seen}/{n} records after {timeout}s")
    return time.monotonic() - t0


def tree_cpu(pid: int) -> float:
    """CPU seconds of a live process tree (children included; not what they reaped)."""
    return proctree.tree_cpu(pid, reaped=False)


QUIX_PYTHON = ROOT / "bench" / ".work" / "quix-venv" / "bin" / "python"
# the peer's constructs (bench/stream_quix.py): (construct, guarantee, commit interval s).
# 0.5 s keeps Quix's exactly-once output about as fresh as ours (our runners commit each
# batch at most 20 ms after its first message);
# 5 s is Quix's default commit interval, its fastest honest setting.
QUIX = [
    ("sliding", "exactly-once", 0.5),
    ("tumbling", "exactly-once", 0.5),
    ("state", "exactly-once", 0.5),
    ("state", "exactly-once", 5.0),
    ("state", "at-least-once", 0.5),
]


def quix_row(construct: str, guarantee: str, commit_s: float) -> str:
    return f"c: Quix {construct}, {guarantee}, commit {commit_s:g} s"


def _timed(argv: list[str], what: str, n: int, env: dict[str, str]) -> dict[str, float]:
    res = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    if res.returncode != 0:
        raise RuntimeError(f"{what} failed: {res.stderr[-2000:]}")
    r = json.loads(res.stdout.strip().splitlines()[-1])
    return {"events/s": n / r["wall"], "events/cpu-s": n / r["cpu"], "wall": r["wall"],
            "cpu": r["cpu"]}  # fmt: skip


def run_pipe(s: Settings, kind: str, src: str, n: int) -> dict[str, float]:
    out = f"{src}.{kind}.out"
    admin = AdminClient({"bootstrap.servers": s.kafka_servers})
    for f in admin.create_topics([NewTopic(out, 1, 1)]).values():
        f.result(30)
    env = {**os.environ, "BENCH_KAFKA": s.kafka_servers}
    group = f"g-{kind}-{uuid.uuid4().hex[:6]}"
    argv = [sys.executable, "-m", "bench.stream_pipes", kind, src, out, group, str(n)]
    return _timed(argv, kind, n, env)


def run_quix(
    s: Settings, construct: str, guarantee: str, commit_s: float, src: str, n: int
) -> dict[str, float]:
    """One Quix construct, from Quix's own venv (made by ``bench/quix_env.sh``)."""
    subprocess.run(["bash", str(ROOT / "bench" / "quix_env.sh")], cwd=ROOT, check=True,
                   capture_output=True)  # fmt: skip
    tag = f"quix-{construct}-{guarantee[:3]}-{commit_s:g}".replace(".", "_")
    out, group = f"{src}.{tag}.out", f"g-{tag}-{uuid.uuid4().hex[:6]}"
    env = {**os.environ, "BENCH_KAFKA": s.kafka_servers}
    argv = [str(QUIX_PYTHON), str(ROOT / "bench" / "stream_quix.py"), construct, guarantee,
            str(commit_s), src, out, group, str(n)]  # fmt: skip
    return _timed(argv, tag, n, env)


class Engine:
    """``fennel-dagster engine`` in a process of its own; ``code``: run that checkout's code."""

    def __init__(self, s: Settings, code: Path | None = None) -> None:
        self.s = s
        self.code = code
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {**os.environ, **self.s.as_env(), **_pythonpath(self.code)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "fennel_dagster.cli.main", "engine", "--id", "bench-1"],
            cwd=self.code or ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip

    def cpu(self) -> float:
        assert self.proc is not None
        return tree_cpu(self.proc.pid)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(120)
            self.proc = None


def _pythonpath(code: Path | None) -> dict[str, str]:
    return {} if code is None else {"PYTHONPATH": str(code)}


def commit_repo(s: Settings, repo: str, topic: str, code: Path | None) -> str:
    """Commit ``repo`` (with ``code``'s client, so its engine reads its own plan format);
    return the output dataset's topic, read from the asset bank (same in every version)."""
    script = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('stream_repos', {str(ROOT / 'bench' / 'stream_repos.py')!r})\n"
        "mod = importlib.util.module_from_spec(spec); sys.modules['stream_repos'] = mod\n"
        "spec.loader.exec_module(mod)\n"
        "try:\n"
        "    from fennel_dagster.client import LocalClient as C\n"
        "except ImportError:  # a baseline from before the HTTP client: one Client class\n"
        "    from fennel_dagster.client import Client as C\n"
        f"C().commit('bench', datasets=mod.REPOS[{repo!r}]({topic!r}))\n"
    )  # fmt: skip
    env = {**os.environ, **s.as_env(), **_pythonpath(code)}
    res = subprocess.run([sys.executable, "-c", script], cwd=code or ROOT, env=env,
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    if res.returncode != 0:
        raise RuntimeError(f"commit of {repo} failed: {res.stderr[-2000:]}")
    with connect(s, s.pg_schema, autocommit=True) as conn:
        row = conn.execute(
            "SELECT name FROM assets WHERE kind = 'topic' AND entity = 'BenchAgg' "
            "AND spec->>'role' = 'dataset'"
        ).fetchone()
    assert row is not None, "BenchAgg has no dataset topic"
    return str(row[0])


def engine_throughput(
    base: Settings, src: str, n: int, keys: int, repo: str, code: Path | None, tag: str
) -> dict[str, float]:
    """Events per CPU-second of an engine (``code``: an older checkout's) on ``repo``."""
    name = f"{base.namespace}{tag}"
    s = base.with_(pg_schema=name, namespace=name, state_dir=base.state_path / tag)
    topic = f"{name}.events"
    admin = AdminClient({"bootstrap.servers": s.kafka_servers})
    for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        f.result(30)
    out = commit_repo(s, repo, topic, code)
    engine = Engine(s, code)
    engine.start()
    try:
        # runners up: one warm-up event through the whole path, then measure from here
        warm = {"uid": keys + 1, "amount": 1.0, "ts": (T0 - timedelta(minutes=1)).isoformat()}
        p = Producer({"bootstrap.servers": s.kafka_servers})
        p.produce(topic, json.dumps(warm).encode(), key=str(keys + 1).encode())
        p.flush(10)
        count_committed(s, out, 1, 300)
        cpu0, t0 = engine.cpu(), time.monotonic()
        copy_events(s, src, topic, n)
        count_committed(s, out, n + 1, 1800)
        wall, cpu = time.monotonic() - t0, engine.cpu() - cpu0
    finally:
        engine.stop()
    return {"events/s": n / wall, "events/cpu-s": n / cpu, "wall": wall, "cpu": cpu}


def baseline_checkout(rev: str) -> Path:
    """A detached worktree of ``rev`` (its code runs on this venv: same dependencies)."""
    path = Path(tempfile.mkdtemp(prefix="fd-baseline-")) / "code"
    subprocess.run(["git", "worktree", "add", "--detach", str(path), rev], cwd=ROOT,
                   check=True, capture_output=True)  # fmt: skip
    return path


def probe(
    s: Settings,
    client: LocalClient,
    topic: str,
    uid: int,
    timeout: float = 60,
    at: datetime | None = None,
) -> float:
    """Seconds from producing one event (ts = ``at``, default now) to seeing it in a lookup."""
    p = Producer({"bootstrap.servers": s.kafka_servers, "linger.ms": 0})
    now = at or datetime.now(UTC)
    t0 = time.monotonic()
    p.produce(topic, json.dumps({"uid": uid, "amount": 1.0, "ts": now.isoformat()}).encode())
    p.flush(10)
    keys = pd.DataFrame({"uid": [uid]})
    while time.monotonic() - t0 < timeout:
        try:
            df, found = client.lookup("BenchAgg", keys, timestamps=[now + timedelta(seconds=1)])
            if bool(found.iloc[0]) and int(df.n.iloc[0]) >= 1:
                return time.monotonic() - t0
        except Exception:  # noqa: BLE001 - engine still starting: keep polling
            pass
        time.sleep(0.01)
    raise RuntimeError(f"event for uid {uid} not visible after {timeout}s")


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def under_load(
    s: Settings, client: LocalClient, topic: str, rate: float, seconds: float, keys: int,
    first_uid: int,
) -> dict[str, float]:  # fmt: skip
    """Freshness while events stamped now arrive at ``rate`` per second (random keys): a
    producer thread keeps the rate, probes one after another for ``seconds``."""
    stop = threading.Event()
    sent: list[float] = []

    def produce() -> None:
        # ``json.dumps`` of each event's dict, byte for byte, from a template: the load's
        # producer shares the two cores with the engine, so it spends 1.6 us an event, not 4.8
        p = Producer({"bootstrap.servers": s.kafka_servers, "linger.ms": 5})
        rnd, i, t0 = random.Random(int(rate)), 0, time.monotonic()
        uids, pick = [str(u).encode() for u in range(keys)], rnd.randrange
        while not stop.is_set():
            due = int((time.monotonic() - t0) * rate)
            tail = b', "amount": 1.0, "ts": "' + datetime.now(UTC).isoformat().encode() + b'"}'
            while i < due:
                p.produce(topic, b'{"uid": ' + uids[pick(keys)] + tail)
                i += 1
            p.poll(0)
            time.sleep(0.005)
        sent.append(i / (time.monotonic() - t0))
        p.flush(60)

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    try:
        time.sleep(3)  # the load is on before the first probe
        cpu0, t0 = time.process_time(), time.monotonic()
        lat, uid, end = [], first_uid, t0 + seconds
        while time.monotonic() < end:
            lat.append(probe(s, client, topic, uid, timeout=300))
            uid += 1
            time.sleep(0.2)
        # what the bench itself takes of the machine meanwhile (the load, librdkafka, probes)
        own = (time.process_time() - cpu0) / (time.monotonic() - t0)
    finally:
        stop.set()
        thread.join(120)
    # drained before the next load: a probe behind everything produced
    drain = probe(s, client, topic, uid, timeout=600)
    return {"rate": rate, "produced/s": sent[0] if sent else 0.0, "probes": len(lat),
            "p50": statistics.median(lat), "p99": pct(lat, 0.99), "max": max(lat),
            "drain": drain, "bench cores": own}  # fmt: skip


# A live load is kept up with when, right after it stops, an event is visible within this
# (an engine falling behind leaves a backlog to drain: seconds of it after a step of LADDER_S)
KEPT_UP_DRAIN_S = 1.0
LADDER_S = 15.0


def kept_up(step: dict[str, float]) -> bool:
    """No backlog left right after the load stopped, and the producer made its rate."""
    return step["drain"] <= KEPT_UP_DRAIN_S and step["produced/s"] >= 0.97 * step["rate"]


def sustained_max(
    s: Settings, client: LocalClient, topic: str, drain_rate: float, keys: int, first_uid: int
) -> tuple[float, list[dict[str, float]]]:
    """The highest live rate the engine keeps up with, events stamped now and produced by a
    live producer beside it (as in ``under_load``): steps down from the backlog's drain rate
    by a tenth at a time until a step ends with no backlog (``KEPT_UP_DRAIN_S``) and the
    producer made its rate. A backlog drains with the machine to itself; a live load shares
    it with the producer and the broker's work for it, so the two maxima differ."""
    steps: list[dict[str, float]] = []
    for i, share in enumerate((1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1)):
        rate = share * drain_rate
        print(f"sustained? {rate:,.0f} events/s ...", flush=True)
        step = under_load(s, client, topic, rate, LADDER_S, keys, first_uid + 10_000 * i)
        steps.append(step)
        if kept_up(step):
            return rate, steps
    return 0.0, steps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--probes", type=int, default=50)
    ap.add_argument("--payments-events", type=int, default=10_000,
                    help="transactions through the example repo (second workload)")  # fmt: skip
    ap.add_argument(
        "--load-s",
        type=float,
        default=20.0,
        help="seconds of probes at each live load (50%% and 90%% of the maximum)",
    )
    ap.add_argument("--drains", type=int, default=3,
                    help="drains of the engine per measurement; the median is reported")  # fmt: skip
    ap.add_argument("--skip-quix", action="store_true")
    ap.add_argument("--baseline", help="also run the engine of this git revision (before/after)")
    args = ap.parse_args()
    name = f"b{uuid.uuid4().hex[:8]}"
    state = Path(tempfile.mkdtemp(prefix="fd-bench-"))
    s = get_settings().with_(pg_schema=name, namespace=name, state_dir=state, partitions=1,
                             engine_snapshot_interval_s=10.0)  # fmt: skip
    src = f"{name}.events"
    admin = AdminClient({"bootstrap.servers": s.kafka_servers})
    for f in admin.create_topics([NewTopic(src, 1, 1)]).values():
        f.result(30)
    produce_events(s, src, args.events, args.keys)
    n = args.events
    rows: dict[str, dict[str, float]] = {}
    rows["a: bare pipe, exactly-once"] = run_pipe(s, "bare", src, n)
    rows["a: bare pipe, at-least-once"] = run_pipe(s, "bare-alo", src, n)
    if not args.skip_quix:
        for construct, guarantee, commit_s in QUIX:
            print(f"Quix {construct} {guarantee} {commit_s} s ...", flush=True)
            rows[quix_row(construct, guarantee, commit_s)] = run_quix(
                s, construct, guarantee, commit_s, src, n
            )

    # the engine's source topic starts empty, so its start-up is not measured
    src2 = f"{name}.engine-events"
    for f in admin.create_topics([NewTopic(src2, 1, 1)]).values():
        f.result(30)
    client = LocalClient(s)
    out_topic = commit_repo(s, "keyless", src2, None)
    engine = Engine(s)
    engine.start()
    # runners up: measure from here (an event older than the bench's, so none of those is late)
    probe(s, client, src2, 30_000_000, timeout=300, at=T0 - timedelta(minutes=1))
    cpu0 = engine.cpu()
    t0 = time.monotonic()
    copy_events(s, src, src2, n)
    count_committed(s, out_topic, n + 1, 1800)
    wall = time.monotonic() - t0
    cpu = engine.cpu() - cpu0
    b_row = "b: fennel_dagster engine, exactly-once"
    rows[b_row] = {"events/s": n / wall, "events/cpu-s": n / cpu, "wall": wall, "cpu": cpu}

    fresh = sorted(probe(s, client, src2, 10_000_000 + i) for i in range(args.probes))
    loads: list[dict[str, float]] = []
    drain_rate = rows[b_row]["events/s"]
    sustained, ladder = sustained_max(s, client, src2, drain_rate, args.keys, 40_000_000)
    tops = [("the backlog's drain rate", drain_rate), ("the sustained maximum", sustained)]
    if sustained == drain_rate:  # it kept up at the drain rate: one maximum, loaded once
        tops = [("the sustained maximum (= the drain rate)", sustained)]
    for of, top in tops:
        for share in (0.5, 0.9):
            rate = share * top
            print(f"live load {rate:,.0f} events/s ...", flush=True)
            loads.append({"share": share, "of": of, **under_load(  # type: ignore[dict-item]
                s, client, src2, rate, args.load_s, args.keys,
                50_000_000 + 100_000 * len(loads))})  # fmt: skip
    engine.stop()
    t0 = time.monotonic()
    engine.start()
    probe(s, client, src2, 20_000_001, timeout=300)
    warm_total = time.monotonic() - t0
    engine.stop()
    shutil.rmtree(state / "bench-1")  # local state lost: restore from S3 + replay
    t0 = time.monotonic()
    engine.start()
    probe(s, client, src2, 20_000_002, timeout=300)
    cold_total = time.monotonic() - t0
    engine.stop()

    if args.payments_events:
        from bench.batch_payments import engine_backfill

        print(f"example repo, {args.payments_events} transactions ...", flush=True)
        pay = engine_backfill(s, args.payments_events)
        rows[f"b: engine, example repo (examples/payments), {args.payments_events:,} "
             "transactions"] = pay  # fmt: skip

    # A drain of 100k events lasts about 2 s, so one drain's rate moves by a third from run to
    # run: the headline is the median of ``--drains`` drains of the keyless repo at this
    # commit (the one above among them), and each side of a comparison the median of as many,
    # this commit and the baseline taking turns.
    drains: dict[str, list[dict[str, float]]] = {"keyless input: this commit": [rows[b_row]]}
    compare: list[tuple[str, str, str]] = []
    old = baseline_checkout(args.baseline) if args.baseline else None
    repos = ("keyless", "keyed") if old else ("keyless",)
    sides: list[tuple[str, Path | None]] = [("this commit", None)]
    if old is not None:
        sides.append((args.baseline, old))
    turns = args.drains if old else args.drains - 1  # alone: the drain above is the first
    try:
        for i in range(turns):
            for repo in repos:
                for label, code in sides:
                    tag = f"{repo[:4]}{'o' if code else 'n'}{i}"
                    drains.setdefault(f"{repo} input: {label}", []).append(
                        engine_throughput(s, src, n, args.keys, repo, code, tag)
                    )
    finally:
        if old is not None:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, check=False
            )
    rows[b_row] = median_drain(drains["keyless input: this commit"])
    if old is not None:
        for repo in ("keyless", "keyed"):
            after, before = f"{repo} input: this commit", f"{repo} input: {args.baseline}"
            mine = drains[after][1:] if repo == "keyless" else drains[after]  # turns taken
            rows[f"b: engine, {after}"] = median_drain(mine)
            rows[f"b: engine, {before}"] = median_drain(drains[before])
            compare.append((repo, f"b: engine, {after}", f"b: engine, {before}"))
    text = report(args, rows, compare, fresh, loads, warm_total, cold_total, ladder, drains)
    print(text)
    (ROOT / "bench" / "results" / "stream.md").write_text(text)
    client.close()


def median_drain(runs: list[dict[str, float]]) -> dict[str, float]:
    """The drain of median events per CPU-second (the lower middle one of an even count)."""
    ranked = sorted(runs, key=lambda r: r["events/cpu-s"])
    return ranked[(len(ranked) - 1) // 2]


def report(
    args: argparse.Namespace,
    rows: dict[str, dict[str, float]],
    compare: list[tuple[str, str, str]],
    fresh: list[float],
    loads: list[dict[str, float]],
    warm_total: float,
    cold_total: float,
    ladder: list[dict[str, float]],
    drains: dict[str, list[dict[str, float]]],
) -> str:
    a, b = rows["a: bare pipe, exactly-once"], rows["b: fennel_dagster engine, exactly-once"]
    quix = {k: r for k, r in rows.items() if k.startswith("c: Quix")}
    exactly = {k: r for k, r in quix.items() if ", exactly-once," in k}
    best = max(exactly, key=lambda k: exactly[k]["events/cpu-s"], default=None)
    same = quix_row("state", "exactly-once", 0.5)
    lines = [
        "# Streaming engine benchmark",
        "",
        f"`python -m bench.stream_bench {' '.join(sys.argv[1:])}` on "
        f"{datetime.now(UTC):%Y-%m-%d}; {os.cpu_count()} cores; one Kafka broker (KRaft), one "
        "partition per topic; every contender reads the same pre-produced events "
        f"({args.events:,} JSON events, {args.keys} keys) in processes of its own.",
        "",
        "| contender | events/s (wall) | events per CPU-second (per core) | wall s | CPU s |",
        "|---|---:|---:|---:|---:|",
    ]
    for k, r in rows.items():
        lines.append(
            f"| {k} | {r['events/s']:,.0f} | {r['events/cpu-s']:,.0f} | {r['wall']:.1f} | {r['cpu']:.1f} |"
        )
    lines += ["", "| drains (events per CPU-second, in the order run) | each | median |",
              "|---|---:|---:|"]  # fmt: skip
    for what, runs in drains.items():
        each = ", ".join(f"{r['events/cpu-s']:,.0f}" for r in runs)
        lines.append(f"| {what} | {each} | {median_drain(runs)['events/cpu-s']:,.0f} |")
    lines += ["", "| ratio (per core) | value | target |", "|---|---:|---:|",
              f"| b: engine, events per CPU-second (median of {len(drains['keyless input: this commit'])} drains) | {b['events/cpu-s']:,.0f} | >= 50,000 |",
              f"| b / a | {b['events/cpu-s'] / a['events/cpu-s']:.2f} | |"]  # fmt: skip
    if best:
        lines.append(f"| b / best honest Quix ({best[3:]}) | "
                     f"{b['events/cpu-s'] / exactly[best]['events/cpu-s']:.2f} | >= 1.5 |")  # fmt: skip
    if same in quix:
        lines.append(f"| b / Quix with the same answer ({same[3:]}) | "
                     f"{b['events/cpu-s'] / quix[same]['events/cpu-s']:.2f} | |")  # fmt: skip
    ae, al = rows["a: bare pipe, exactly-once"], rows["a: bare pipe, at-least-once"]
    lines.append(
        f"| bare pipe: exactly-once / at-least-once | {ae['events/cpu-s'] / al['events/cpu-s']:.2f} | |"
    )
    alo = quix_row("state", "at-least-once", 0.5)
    if same in quix and alo in quix:
        lines.append(f"| Quix state: exactly-once / at-least-once | "
                     f"{quix[same]['events/cpu-s'] / quix[alo]['events/cpu-s']:.2f} | |")  # fmt: skip
    for repo, after_key, before_key in compare:
        ratio = rows[after_key]["events/cpu-s"] / rows[before_key]["events/cpu-s"]
        lines.append(f"| {repo} input: this commit / {args.baseline} (per core) | {ratio:.2f} | |")
    lines += ["", "| engine (keyless repo) | value |", "|---|---:|",
              f"| idle: event -> lookup freshness p50 ({len(fresh)} probes) | {statistics.median(fresh) * 1000:.0f} ms |",
              f"| idle: event -> lookup freshness p99 | {pct(fresh, 0.99) * 1000:.0f} ms |"]  # fmt: skip
    for st in ladder:
        kept = kept_up(st)
        lines.append(f"| sustained maximum, {LADDER_S:.0f} s at {st['rate']:,.0f} events/s "
                     f"({st['produced/s']:,.0f} produced): drained {st['drain'] * 1000:,.0f} ms "
                     f"after | {'kept up' if kept else 'fell behind'} |")  # fmt: skip
    for ld in loads:
        lines += [
            f"| {ld['share']:.0%} of {ld['of']} ({ld['rate']:,.0f} events/s asked, "
            f"{ld['produced/s']:,.0f} produced; the bench's process used "
            f"{ld['bench cores']:.2f} cores): freshness p50 / p99 / max "
            f"({ld['probes']:.0f} probes) | {ld['p50'] * 1000:,.0f} / {ld['p99'] * 1000:,.0f} "
            f"/ {ld['max'] * 1000:,.0f} ms |"
        ]
    lines += [f"| warm restart -> new event visible | {warm_total:.1f} s |",
              f"| cold restart (state deleted; S3 snapshot + replaylog) -> new event visible | {cold_total:.1f} s |"]  # fmt: skip
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
