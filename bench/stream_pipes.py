"""Contenders of the streaming benchmark, each run as its own process (its own core).

``python -m bench.stream_pipes bare|bare-alo|quix|quix-alo SRC OUT GROUP N`` consumes N
events of SRC and writes to OUT, then prints one JSON line: wall seconds and CPU seconds.
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


def quix(servers: str, src: str, out: str, group: str, n: int, eos: bool) -> None:
    """Quix Streams: group by uid (a repartition topic), 1 h sliding window Sum + Count."""
    from quixstreams import Application
    from quixstreams.dataframe.windows import Count, Sum

    def ts_of(value, headers, timestamp, timestamp_type):  # type: ignore[no-untyped-def]
        from datetime import datetime

        return int(datetime.fromisoformat(value["ts"]).timestamp() * 1000)

    app = Application(
        broker_address=servers, consumer_group=group, auto_offset_reset="earliest",
        processing_guarantee="exactly-once" if eos else "at-least-once",
        state_dir=f"/tmp/quix-state-{group}", commit_interval=0.5, loglevel="WARNING",
    )  # fmt: skip
    topic = app.topic(src, value_deserializer="json", timestamp_extractor=ts_of)
    out_topic = app.topic(out, value_serializer="json", key_serializer="json")
    sdf = app.dataframe(topic).group_by("uid")
    sdf = sdf.sliding_window(duration_ms=3_600_000, grace_ms=3_600_000).agg(
        total=Sum("amount"), n=Count()
    ).current()  # fmt: skip
    sdf.to_topic(out_topic)
    t0 = time.monotonic()
    app.run(count=n, timeout=600, collect=False)
    print(json.dumps({"wall": time.monotonic() - t0, "cpu": _cpu()}))


if __name__ == "__main__":
    kind, src, out, group, n = sys.argv[1:6]
    servers = os.environ["BENCH_KAFKA"]
    if kind.startswith("bare"):
        bare(servers, src, out, group, int(n), eos=kind == "bare")
    else:
        quix(servers, src, out, group, int(n), eos=kind == "quix")
