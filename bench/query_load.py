"""The query benchmark's load generator: a process of its own, standard library only (uvloop
when importable), kept-alive HTTP/1.1 connections, one request per connection at a time.

``python bench/query_load.py --serve-floor PORT`` serves the harness's floor (no work);
``python bench/query_load.py SPEC.json OUT.json`` where the spec names the target and the
requests::

    {"host": "127.0.0.1", "port": 8000, "path": "/api/v1/query",
     "headers": {"Authorization": "Bearer ..."},
     "bodies": ["{...}", ...],          # one per key; each request picks one at random
     "expect": "a substring every good answer holds",
     "reject": "a substring no good answer holds",
     "closed": {"requests": 3000, "warmup": 300},
     "open": {"rates": [50, 100, 200, 400, 800, 1600], "min_requests": 2000, "min_s": 4,
              "max_s": 10, "bound_ms": 5.0, "give_up_ms": 50.0, "refine": 2}}

Closed loop: one connection, the next request sent when the previous answer is read.
Open loop: requests are due at ``start + i / rate`` whatever the server does (a thread with
``time.sleep``'s sub-millisecond resolution hands them to the event loop, whose own timers
tick in whole milliseconds); latency is measured from the due time, so time spent queued
behind a slow answer counts (no coordinated omission). Each rate runs for
``min_requests / rate`` seconds, clamped to [min_s, max_s]. The rates rise until the server
saturates (an error, a median past ``give_up_ms``, or under 90% of the rate answered); then
``refine`` bisections between the highest rate held at p99 <= ``bound_ms`` and the next one
narrow down that boundary. Every latency is the
time to the last byte of a 200 answer holding ``expect`` and not ``reject``; anything else
is an error.
"""

from __future__ import annotations

import asyncio
import gc
import json
import random
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

MAX_CONNECTIONS = 512


class HttpError(Exception):
    pass


class Conn:
    """One kept-alive HTTP/1.1 connection (Content-Length or chunked answers)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, host: str, port: int) -> Conn:
        reader, writer = await asyncio.open_connection(host, port, limit=2**20)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(reader, writer)

    async def request(self, data: bytes) -> tuple[int, bytes, bool]:
        """(status, body, keep): ``keep`` is False when the server asked to close."""
        self.writer.write(data)
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        length, chunked, keep = None, False, True
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
            elif name == b"connection" and b"close" in value.lower():
                keep = False
        if chunked:
            body = b""
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
                chunk = await self.reader.readexactly(size + 2)
                if size == 0:
                    break
                body += chunk[:-2]
        elif length is not None:
            body = await self.reader.readexactly(length)
        else:
            raise HttpError("answer with neither Content-Length nor chunked encoding")
        return status, body, keep

    def close(self) -> None:
        self.writer.close()


FAILURES = (OSError, HttpError, asyncio.IncompleteReadError, asyncio.LimitOverrunError)


async def send(conn: Conn, t: Target, data: bytes) -> tuple[Conn, int, bytes, int]:
    """Send on ``conn``; a kept-alive connection the server closed before answering (a
    worker recycled, say) is replaced and the request sent once more, as HTTP clients do.
    Returns the connection to use next, the answer and the number of retries."""
    try:
        status, body, keep = await conn.request(data)
        retries = 0
    except FAILURES:
        conn.close()
        conn = await Conn.open(t.host, t.port)
        status, body, keep = await conn.request(data)  # a second failure is an error
        retries = 1
    if not keep:
        conn.close()
        conn = await Conn.open(t.host, t.port)
    return conn, status, body, retries


@dataclass
class Target:
    host: str
    port: int
    path: str
    headers: dict[str, str]
    bodies: list[bytes]
    expect: bytes
    reject: bytes
    rnd: random.Random = field(default_factory=lambda: random.Random(7))

    def __post_init__(self) -> None:
        head = f"POST {self.path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in self.headers.items())
        head += "Content-Type: application/json\r\n"
        self.requests = [
            (head + f"Content-Length: {len(b)}\r\n\r\n").encode() + b for b in self.bodies
        ]

    def pick(self) -> bytes:
        return self.requests[self.rnd.randrange(len(self.requests))]

    def check(self, status: int, body: bytes) -> str | None:
        if status != 200:
            return f"HTTP {status}: {body[:200]!r}"
        if self.expect not in body or (self.reject and self.reject in body):
            return f"unexpected answer {body[:200]!r}"
        return None


def summary(lat_ns: list[int], errors: list[str], wall: float, **extra: Any) -> dict[str, Any]:
    xs = sorted(lat_ns)
    n = len(xs)

    def pct(q: float) -> float | None:
        if not n:
            return None
        return xs[min(n - 1, max(0, int(q * n + 0.5) - 1))] / 1e6  # nearest rank, ms

    return {
        "ok": n, "errors": len(errors), "first_errors": errors[:3], "wall_s": round(wall, 3),
        "achieved_rps": round(n / wall, 1) if wall > 0 else None,
        "p50_ms": pct(0.50), "p90_ms": pct(0.90), "p99_ms": pct(0.99), "p999_ms": pct(0.999),
        "max_ms": xs[-1] / 1e6 if n else None,
        "mean_ms": sum(xs) / n / 1e6 if n else None, **extra,
    }  # fmt: skip


async def closed_loop(t: Target, requests: int, warmup: int) -> dict[str, Any]:
    conn = await Conn.open(t.host, t.port)
    errors: list[str] = []
    lat: list[int] = []
    retries = 0
    wall0, cpu0 = time.perf_counter(), time.process_time()
    try:
        for i in range(warmup + requests):
            data = t.pick()
            t0 = time.perf_counter_ns()
            try:
                conn, status, body, again = await send(conn, t, data)
                retries += again
            except FAILURES as e:
                errors.append(f"{type(e).__name__}: {e}")
                conn = await Conn.open(t.host, t.port)
                continue
            took = time.perf_counter_ns() - t0
            bad = t.check(status, body)
            if i < warmup:
                if i == warmup - 1:
                    wall0, cpu0 = time.perf_counter(), time.process_time()
                    gc.collect()
                    gc.freeze()  # no collector pauses in the timed part
                continue
            if bad:
                errors.append(bad)
            else:
                lat.append(took)
        wall = time.perf_counter() - wall0
    finally:
        conn.close()
    cpu = time.process_time() - cpu0
    return summary(lat, errors, wall, mode="closed", concurrency=1, retries=retries,
                   load_cpu_s=round(cpu, 3))  # fmt: skip


async def open_loop(t: Target, rate: float, seconds: float) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    idle: list[Conn] = []
    opened = 0
    for _ in range(min(MAX_CONNECTIONS, max(4, int(rate * 0.02)))):  # ~20 ms of arrivals
        idle.append(await Conn.open(t.host, t.port))
        opened += 1
    lat: list[int] = []
    late: list[int] = []  # how late this process sent a request (its own overhead)
    errors: list[str] = []
    retried = [0]
    waiting: asyncio.Queue[Conn] = asyncio.Queue()
    for c in idle:
        waiting.put_nowait(c)
    total = int(rate * seconds)
    tasks: set[asyncio.Task[None]] = set()
    done = asyncio.Event()
    remaining = total

    async def one(due_ns: int) -> None:
        nonlocal opened, remaining
        try:
            if waiting.empty() and opened < MAX_CONNECTIONS:
                opened += 1
                waiting.put_nowait(await Conn.open(t.host, t.port))
            conn = await waiting.get()
            late.append(time.perf_counter_ns() - due_ns)
            try:
                conn, status, body, again = await send(conn, t, t.pick())
                retried[0] += again
            except FAILURES as e:
                errors.append(f"{type(e).__name__}: {e}")
                waiting.put_nowait(await Conn.open(t.host, t.port))
                return
            end = time.perf_counter_ns()
            waiting.put_nowait(conn)
            bad = t.check(status, body)
            if bad:
                errors.append(bad)
            else:
                lat.append(end - due_ns)
        finally:
            remaining -= 1
            if remaining == 0:
                done.set()

    def fire(due_ns: int) -> None:
        task = loop.create_task(one(due_ns))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    def ticker(start_ns: int) -> None:
        period = 1e9 / rate
        for i in range(total):
            due = start_ns + int(i * period)
            wait = (due - time.perf_counter_ns()) / 1e9
            if wait > 0:
                time.sleep(wait)
            loop.call_soon_threadsafe(fire, due)

    gc.collect()
    gc.freeze()
    cpu0 = time.process_time()
    start_ns = time.perf_counter_ns() + 20_000_000
    th = threading.Thread(target=ticker, args=(start_ns,), daemon=True)
    th.start()
    try:
        await asyncio.wait_for(done.wait(), timeout=seconds + 30)
    except TimeoutError:
        errors.append(f"{remaining} requests unanswered 30 s after the last was due")
    wall = (time.perf_counter_ns() - start_ns) / 1e9
    th.join()
    while not waiting.empty():
        waiting.get_nowait().close()
    late.sort()
    send_late = late[int(0.99 * (len(late) - 1))] / 1e6 if late else None
    cpu = time.process_time() - cpu0
    return summary(lat, errors, wall, mode="open", rate=rate, seconds=seconds,
                   connections=opened, send_late_p99_ms=send_late, retries=retried[0],
                   load_cpu_s=round(cpu, 3))  # fmt: skip


def saturated(res: dict[str, Any], give_up_ms: float) -> bool:
    """The server no longer keeps up: errors, a median past ``give_up_ms`` or under 90% of
    the offered rate answered. (Only the median: one stall must not end the sweep.)"""
    return bool(
        res["errors"]
        or (res["p50_ms"] or float("inf")) > give_up_ms
        or (res["achieved_rps"] or 0) < 0.9 * res["rate"]
    )


def held(res: dict[str, Any], bound_ms: float) -> bool:
    """A rate is held when every request got a good answer and p99 <= bound_ms."""
    return not res["errors"] and res["p99_ms"] is not None and res["p99_ms"] <= bound_ms


async def sweep(t: Target, o: dict[str, Any]) -> list[dict[str, Any]]:
    bound, give_up = float(o.get("bound_ms", 5.0)), float(o.get("give_up_ms", 50.0))

    async def at(rate: float) -> dict[str, Any]:
        seconds = min(float(o.get("max_s", 10)),
                      max(float(o.get("min_s", 4)), int(o.get("min_requests", 2000)) / rate))  # fmt: skip
        res = await open_loop(t, rate, seconds)
        gc.unfreeze()
        await asyncio.sleep(float(o.get("pause_s", 1.0)))  # let the server settle
        return res

    steps: list[dict[str, Any]] = []
    for rate in o["rates"]:
        res = await at(float(rate))
        steps.append(res)
        if saturated(res, give_up):
            break
    ok = [s["rate"] for s in steps if held(s, bound)]
    lo = max(ok, default=0.0)
    above = [s["rate"] for s in steps if s["rate"] > lo and not held(s, bound)]
    if lo and above:
        hi = min(above)
        for _ in range(int(o.get("refine", 0))):
            mid = round((lo + hi) / 2)
            if mid in (lo, hi):
                break
            res = await at(float(mid))
            res["refine"] = True
            steps.append(res)
            lo, hi = (mid, hi) if held(res, bound) else (lo, mid)
    return sorted(steps, key=lambda s: s["rate"])


async def run(spec: dict[str, Any]) -> dict[str, Any]:
    t = Target(spec["host"], int(spec["port"]), spec["path"], spec.get("headers", {}),
               [b.encode() for b in spec["bodies"]], spec.get("expect", "").encode(),
               spec.get("reject", "").encode())  # fmt: skip
    out: dict[str, Any] = {}
    if "closed" in spec:
        c = spec["closed"]
        out["closed"] = await closed_loop(t, int(c["requests"]), int(c.get("warmup", 0)))
        gc.unfreeze()
    if "open" in spec:
        out["open"] = await sweep(t, spec["open"])
    return out


async def floor_server(port: int) -> None:
    """The harness's floor: an HTTP/1.1 server doing no work, a fixed JSON answer to any
    request (same event loop, parser style and loopback as the generator)."""
    answer = b'{"ok": true, "spend": 1.0}'
    reply = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
             b"Content-Length: %d\r\n\r\n%s" % (len(answer), answer))  # fmt: skip

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                await reader.readexactly(length)
                writer.write(reply)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


def _runner() -> Any:
    try:
        import uvloop  # type: ignore[import-not-found,unused-ignore]

        return uvloop.run
    except ImportError:
        return asyncio.run


def main() -> None:
    if sys.argv[1] == "--serve-floor":
        _runner()(floor_server(int(sys.argv[2])))
        return
    spec = json.loads(open(sys.argv[1]).read())
    results = _runner()(run(spec))
    with open(sys.argv[2], "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
