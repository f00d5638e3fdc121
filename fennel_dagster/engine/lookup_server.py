"""The engine's lookup endpoint: HTTP/JSON on uvicorn (lookups as bare ASGI), served from the hangars
of its own runners.

``POST /lookup`` with ``{"job": <job hash>, "partition": p, "keys": [{...}],
"micros": [µs since the epoch, UTC...], "fields": [...] | null}`` answers
``{"rows": [...], "found": [...]}``; ``POST /lookups`` with ``{"lookups": [request, ...]}``
answers each in one round trip (``{"answers": [{"status": 200, "rows": ..., ...}, ...]}``)
from a read-only secondary RocksDB instance that follows the runner's hangar. ``GET /metrics``
is this process's Prometheus metrics. Lookups must carry the platform's service credential
(``X-Fennel-Service``, from the metadata store): users reach data only through the query
servers, which check their tokens.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from fennel_dagster.engine import metrics
from fennel_dagster.engine.hangar import Hangar
from fennel_dagster.engine.lookup_client import ENGINE_KEEPALIVE_S, SERVICE_HEADER
from fennel_dagster.engine.lookups import answer_records
from fennel_dagster.engine.rocks_tuning import RocksTuning
from fennel_dagster.metadata.registry import JobRow
from fennel_dagster.query.lookup import LookupFailed

log = logging.getLogger("fennel_dagster.engine.lookup")
# a lookup of this few keys is answered on the event loop: RocksDB reads of a few keys take
# microseconds, less than a thread pool hand-off (p50 0.70 -> 0.55 ms, p99 2.2 -> 1.1 ms here)
INLINE_KEYS = 8


_JSON = [(b"content-type", b"application/json")]


class _Gone(LookupFailed):
    """The caller hung up before its request's body arrived."""


async def _body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Gone("the caller disconnected mid-request")
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


class NoStateYet(LookupFailed):
    """The partition's runner has not written state yet: every key is absent."""


class StateMoved(LookupFailed):
    """The partition's state directory vanished mid-read: the partition is being handed to
    another engine (its runner stopped here and its state was cleared). The caller retries,
    as for any partition in motion, and finds the new owner."""


class Followers:
    """Secondary hangars of owned partitions, opened lazily, caught up only when their
    primary has written since (a catch-up costs ~8 ms here; a fingerprint check ~50 µs)."""

    def __init__(
        self, path_of: Callable[[JobRow, int], Path], tuning: RocksTuning | None = None
    ) -> None:
        self.path_of = path_of
        self.tuning = tuning
        self.scratch = Path(tempfile.mkdtemp(prefix="fd-lookup-"))
        self._open: dict[tuple[str, int], _Follower] = {}
        self._lock = threading.Lock()

    def read(self, job: JobRow, partition: int, fn: Callable[[Hangar], Any]) -> Any:
        key = (job.hash, partition)
        with self._lock:
            entry = self._open.get(key)
            if entry is None:
                path = self.path_of(job, partition)
                if not (path / "CURRENT").exists():
                    raise NoStateYet(f"partition {partition} of {job.name} has no state yet")
                scratch = self.scratch / f"{job.hash[:12]}-{partition}"
                entry = _Follower(Hangar.open_secondary(path, scratch, self.tuning))
                self._open[key] = entry
        try:
            with entry.lock:
                version = entry.hangar.primary_version()
                if version != entry.seen:
                    entry.hangar.catch_up()
                    entry.seen = version
                return fn(entry.hangar)
        except Exception as e:
            path = self.path_of(job, partition)
            if (path / "CURRENT").exists():
                raise
            with self._lock:  # reopened if the partition comes back
                gone = self._open.pop(key, None)
            if gone is not None:
                with gone.lock, contextlib.suppress(Exception):
                    gone.hangar.close()
            raise StateMoved(
                f"partition {partition} of {job.name} left this engine mid-read "
                f"({type(e).__name__})"
            ) from e

    def drop(self, keep: set[tuple[str, int]]) -> None:
        with self._lock:
            for key in [k for k in self._open if k not in keep]:
                entry = self._open.pop(key)
                with entry.lock:
                    entry.hangar.close()


@dataclass
class _Follower:
    hangar: Hangar
    lock: threading.Lock = field(default_factory=threading.Lock)
    seen: tuple[tuple[str, int, int], ...] = ()


class LookupEndpoint:
    """uvicorn (uvloop, httptools, kept-alive HTTP/1.1) on a thread of the engine's process;
    the socket is bound first, so ``server_address`` is known at once (port 0: any free
    port). uvloop, not asyncio's own loop: on a non-main thread the latter answered in ~45 ms
    here against ~1 ms."""

    def __init__(self, app: ASGIApp, host: str, port: int) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        self.server_address: tuple[str, int] = self.sock.getsockname()
        config = uvicorn.Config(app, http="httptools", loop="uvloop", lifespan="off",
                                log_level="warning", access_log=False,
                                timeout_keep_alive=ENGINE_KEEPALIVE_S)  # fmt: skip
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self.sock]},
                                        name="lookup-server", daemon=True)  # fmt: skip
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started and self._thread.is_alive():
            if time.monotonic() > deadline:
                raise RuntimeError("the engine's lookup endpoint did not start in 30 s")
            time.sleep(0.01)

    def shutdown(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)
        self.sock.close()


def serve(
    host: str,
    port: int,
    jobs: Callable[[str, int], JobRow | None],
    followers: Followers,
    secret: str,
    metrics_dir: Path | None = None,
) -> LookupEndpoint:
    """Start the endpoint; ``jobs(hash, p)`` is the owned job or None; ``secret`` is the
    service credential every lookup must present."""

    async def health(request: Request) -> Response:
        return Response(b'{"ok":true}', media_type="application/json")

    async def metrics_page(request: Request) -> Response:
        return Response(metrics.collect(metrics_dir), media_type=CONTENT_TYPE_LATEST)

    def answer(req: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """One lookup request's status and answer."""
        job = jobs(req["job"], int(req["partition"]))
        if job is None:
            return 409, {"error": "this engine does not own that partition"}
        keys: list[dict[str, Any]] = req["keys"]
        stamps = [int(t) for t in req["micros"]]
        if len(stamps) != len(keys) or not all(isinstance(k, dict) for k in keys):
            raise ValueError("keys must be objects, one timestamp (micros) per key")
        fields = req.get("fields")
        try:
            rows, found = followers.read(job, int(req["partition"]),
                                         lambda h: answer_records(h, job, keys, stamps, fields))  # fmt: skip
        except NoStateYet:
            return 200, {"rows": [{} for _ in keys], "found": [False] * len(keys)}
        except StateMoved as e:  # as for a partition not owned: the caller retries
            return 409, {"error": str(e)}
        return 200, {"rows": rows, "found": found}

    def answer_each(reqs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Several requests' answers, each with its own status: one partition that moved
        away does not fail the others."""
        out = []
        for req in reqs:
            try:
                status, body = answer(req)
            except LookupFailed as e:
                status, body = 400, {"error": str(e)}
            out.append({"status": status, **body})
        return out

    service = SERVICE_HEADER.lower().encode()

    def refused(scope: Scope) -> tuple[int, dict[str, Any]] | None:
        given = next((v for k, v in scope["headers"] if k == service), b"")
        if hmac.compare_digest(given, secret.encode()):
            return None
        return 401 if not given else 403, {
            "error": "engine lookups need the platform's service credential; "
            "query through a query server (`fennel-dagster serve`) instead"}  # fmt: skip

    async def answered(scope: Scope, receive: Receive, many: bool) -> tuple[int, dict[str, Any]]:
        if (no := refused(scope)) is not None:
            return no
        try:
            req = orjson.loads(await _body(receive))
            if many:
                reqs = req["lookups"]
                if not isinstance(reqs, list) or not all(isinstance(r, dict) for r in reqs):
                    raise ValueError("lookups must be a list of lookup requests")
                keys = sum(len(r.get("keys") or ()) for r in reqs)
                if keys <= INLINE_KEYS:
                    return 200, {"answers": answer_each(reqs)}
                return 200, {"answers": await run_in_threadpool(answer_each, reqs)}
            if len(req.get("keys") or ()) <= INLINE_KEYS:
                return answer(req)
            return await run_in_threadpool(answer, req)
        except LookupFailed as e:
            return 400, {"error": str(e)}
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            return 400, {"error": f"malformed lookup request: {type(e).__name__}: {e}"}
        except Exception as e:  # noqa: BLE001 - report, keep serving
            log.exception("lookup failed")
            return 500, {"error": f"{type(e).__name__}: {e}"}

    pages = Starlette(routes=[Route("/health", health), Route("/metrics", metrics_page)])
    # POST /lookup: one request; POST /lookups: {"lookups": [request, ...]} -> {"answers":
    # [{"status": ..., ...}, ...]}, a query's lookups of several datasets in one round trip
    many_of = {"/lookup": False, "/lookups": True}

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        """The lookup routes as bare ASGI: Starlette's middleware, routing, request and
        response objects cost as much CPU as answering a one-key lookup (~0.1 ms); the
        other pages go through Starlette."""
        many = many_of.get(scope["path"]) if scope["type"] == "http" else None
        if many is None or scope["method"] != "POST":
            return await pages(scope, receive, send)
        status, answer = await answered(scope, receive, many)
        body = orjson.dumps(answer)
        headers = [*_JSON, (b"content-length", str(len(body)).encode())]  # else: chunked
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return LookupEndpoint(app, host, port)
