"""The engine's lookup endpoint: HTTP/JSON, served from the hangars of its own runners.

``POST /lookup`` with ``{"job": <job hash>, "partition": p, "keys": [{...}],
"timestamps": [iso...], "fields": [...] | null}`` answers ``{"rows": [...], "found": [...]}``
from a read-only secondary RocksDB instance that follows the runner's hangar. ``GET /metrics``
is this process's Prometheus metrics. Lookups must carry the platform's service credential
(``X-Fennel-Service``, from the metadata store): users reach data only through the query
servers, which check their tokens.
"""

from __future__ import annotations

import hmac
import json
import logging
import tempfile
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pandas as pd
from prometheus_client import CONTENT_TYPE_LATEST

from fennel_dagster.engine import metrics
from fennel_dagster.engine.hangar import Hangar
from fennel_dagster.engine.lookup_client import SERVICE_HEADER
from fennel_dagster.engine.lookups import answer
from fennel_dagster.metadata.registry import JobRow
from fennel_dagster.ops.rows import to_records
from fennel_dagster.query.lookup import LookupFailed

log = logging.getLogger("fennel_dagster.engine.lookup")


class NoStateYet(LookupFailed):
    """The partition's runner has not written state yet: every key is absent."""


class Followers:
    """Secondary hangars of owned partitions, opened lazily and caught up per request."""

    def __init__(self, path_of: Callable[[JobRow, int], Path]) -> None:
        self.path_of = path_of
        self.scratch = Path(tempfile.mkdtemp(prefix="fd-lookup-"))
        self._open: dict[tuple[str, int], tuple[Hangar, threading.Lock]] = {}
        self._lock = threading.Lock()

    def read(self, job: JobRow, partition: int, fn: Callable[[Hangar], Any]) -> Any:
        key = (job.hash, partition)
        with self._lock:
            entry = self._open.get(key)
            if entry is None:
                path = self.path_of(job, partition)
                if not (path / "CURRENT").exists():
                    raise NoStateYet(f"partition {partition} of {job.name} has no state yet")
                entry = (Hangar.open_secondary(path, self.scratch / f"{job.hash[:12]}-{partition}"),
                         threading.Lock())  # fmt: skip
                self._open[key] = entry
        hangar, lock = entry
        with lock:
            hangar.catch_up()
            return fn(hangar)

    def drop(self, keep: set[tuple[str, int]]) -> None:
        with self._lock:
            for key in [k for k in self._open if k not in keep]:
                hangar, lock = self._open.pop(key)
                with lock:
                    hangar.close()


def serve(
    host: str,
    port: int,
    jobs: Callable[[str, int], JobRow | None],
    followers: Followers,
    secret: str,
    metrics_dir: Path | None = None,
) -> ThreadingHTTPServer:
    """Start the endpoint in a daemon thread; ``jobs(hash, p)`` is the owned job or None;
    ``secret`` is the service credential every lookup must present."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def _reply(self, code: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/health":
                self._reply(200, {"ok": True})
            elif self.path == "/metrics":
                data = metrics.collect(metrics_dir)
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE_LATEST)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            else:
                self._reply(404, {"error": f"no such endpoint {self.path}"})

        def do_POST(self) -> None:
            if self.path != "/lookup":
                self._reply(404, {"error": f"no such endpoint {self.path}"})
                return
            given = self.headers.get(SERVICE_HEADER, "")
            if not hmac.compare_digest(given.encode(), secret.encode()):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self._reply(401 if not given else 403, {
                    "error": "engine lookups need the platform's service credential; "
                    "query through a query server (`fennel-dagster serve`) instead"})  # fmt: skip
                return
            try:
                req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                job = jobs(req["job"], int(req["partition"]))
                if job is None:
                    self._reply(409, {"error": "this engine does not own that partition"})
                    return
                keys = pd.DataFrame(req["keys"])
                ts = pd.Series(pd.to_datetime(req["timestamps"], utc=True, format="ISO8601"))
                df, found = followers.read(
                    job,
                    int(req["partition"]),
                    lambda h: answer(h, job, keys, ts, req.get("fields")),
                )
                self._reply(200, {"rows": to_records(df), "found": [bool(x) for x in found]})
            except NoStateYet:
                self._reply(
                    200, {"rows": [{} for _ in req["keys"]], "found": [False] * len(req["keys"])}
                )
            except LookupFailed as e:
                self._reply(400, {"error": str(e)})
            except Exception as e:  # noqa: BLE001 - report, keep serving
                log.exception("lookup failed")
                self._reply(500, {"error": f"{type(e).__name__}: {e}"})

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="lookup-server", daemon=True).start()
    return server
