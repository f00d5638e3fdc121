"""Contenders of the streaming benchmark, each run as its own process (its own core).

``python -m bench.stream_pipes bare|bare-alo SRC OUT GROUP N`` consumes N events of SRC and
writes to OUT, then prints one JSON line: wall seconds and CPU seconds. Quix Streams, the
peer, runs from its own venv: ``bench/stream_quix.py``.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def bare(servers: str, src: str, out: str, group: str, n: int, eos: bool) -> None:
    """The ceiling: consume -> produce with no logic (transactional when ``eos``)."""
    c = Consumer({"bootstrap.servers": servers, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed"})  # fmt: skip
    conf = {"bootstrap.servers": servers, "linger.ms": 5}
    if eos:
        conf["transactional.id"] = f"{group}-tx"
    p = Producer(conf)
    if eos:
        p.init_transactions(30)
    c.subscribe([src])
    seen, t0, cpu0 = 0, None, 0.0
    while seen < n:
        msgs = [m for m in c.consume(5000, 1.0) if not m.error()]
        if not msgs:
            continue
        if t0 is None:
            t0, cpu0 = time.monotonic(), _cpu()
        if eos:
            p.begin_transaction()
        for m in msgs:
            p.produce(out, m.value(), m.key())
        offsets = {}
        for m in msgs:
            offsets[(m.topic(), m.partition())] = m.offset() + 1
        tps = [TopicPartition(t, q, o) for (t, q), o in offsets.items()]
        if eos:
            p.send_offsets_to_transaction(tps, c.consumer_group_metadata(), 30)
            p.commit_transaction(30)
        else:
            p.poll(0)
            c.commit(offsets=tps, asynchronous=True)
        seen += len(msgs)
    p.flush(30)
    print(json.dumps({"wall": time.monotonic() - (t0 or time.monotonic()), "cpu": _cpu() - cpu0}))


if __name__ == "__main__":
    kind, src, out, group, n = sys.argv[1:6]
    servers = os.environ["BENCH_KAFKA"]
    if kind not in ("bare", "bare-alo"):
        raise SystemExit(f"unknown pipe {kind!r}: bare or bare-alo")
    bare(servers, src, out, group, int(n), eos=kind == "bare")
