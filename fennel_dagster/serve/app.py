"""The ASGI application: routes, authentication, errors, metrics and request logs.

``fennel-dagster serve`` runs it under uvicorn (uvloop, httptools). Every route but
``/health``, ``/metrics`` and ``/openapi.json`` needs a bearer token. Errors are JSON with a
reason and a request id; a 5xx is only ever the server's own fault.
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from functools import lru_cache
from typing import Any

import graphql as gql
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.multiprocess import MultiProcessCollector
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from strawberry.schema.exceptions import CannotGetOperationTypeError, InvalidOperationTypeError

from fennel_dagster.commit.errors import BranchNotFoundError, CommitRejected
from fennel_dagster.engine.barrier import BarrierTimeout
from fennel_dagster.engine.lookup_client import EngineUnavailable
from fennel_dagster.errors import FennelError
from fennel_dagster.heap import freeze_startup_heap
from fennel_dagster.query.execute import ExtractorError
from fennel_dagster.query.lookup import DatasetNotFound, LookupFailed
from fennel_dagster.query.plan import QueryPlanError
from fennel_dagster.serve import graphql, graphql_fast, persisted, rest
from fennel_dagster.serve.auth import AuthError, authenticate
from fennel_dagster.serve.frames import BadRequest, NotFound
from fennel_dagster.serve.inbox import InboxUnavailable
from fennel_dagster.serve.openapi import document
from fennel_dagster.serve.persisted import PersistedQueryNotFound
from fennel_dagster.serve.server import Server
from fennel_dagster.settings import Settings, get_settings

log = logging.getLogger("fennel_dagster.serve.requests")
LATENCY = Histogram(
    "fennel_query_server_request_seconds", "Request latency by route and status", ["route", "status"],
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5),
)  # fmt: skip
ERRORS = Counter(
    "fennel_query_server_errors", "Requests answered with an error", ["route", "status"]
)
MAX_QUERY_CHARS = 100_000
METRICS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"  # set by ``serve --workers N`` (N > 1)
EXECUTORS_ENV = "FENNEL_DAGSTER_SERVE_EXECUTORS"

Handler = Callable[[Request], Awaitable[Response]]


def status_of(e: BaseException) -> int:
    match e:
        case AuthError():
            return e.status
        case BranchNotFoundError() | DatasetNotFound() | NotFound():
            return 404
        case EngineUnavailable() | InboxUnavailable():
            return 503
        case BarrierTimeout():
            return 504
        case ExtractorError():
            return 422  # user code failed on this input: the request, not the server
        case BadRequest() | QueryPlanError() | LookupFailed() | FennelError():
            return 400
    return 500


def guarded(handler: Handler, route: str, public: bool = False) -> Handler:
    """Authenticate (unless public), time, log and turn errors into JSON."""

    async def run(request: Request) -> Response:
        rid = request.headers.get("x-request-id") or uuid.uuid4().hex[:16]
        start = time.perf_counter()
        who = "-"
        try:
            if not public:
                server: Server = request.app.state.server
                request.state.principal = authenticate(
                    request.headers.get("authorization"), server.state.tokens
                )
                who = request.state.principal.token.name
            response = await handler(request)
        except Exception as e:  # noqa: BLE001 - every error becomes a JSON answer
            status = status_of(e)
            if status == 500:  # a bug: logged whole, answered without internals
                log.exception("request %s on %s failed", rid, route)
            body: dict[str, object] = {"request_id": rid}
            if status == 500:
                body["error"] = f"internal error ({type(e).__name__}); request id {rid}"
            else:  # the client raises the same class, with the same text and hint
                body.update(error=str(e), kind=type(e).__name__)
                if getattr(e, "hint", None):
                    body["hint"] = e.hint  # type: ignore[attr-defined]
                if isinstance(e, CommitRejected):
                    body["violations"] = [vars(v) for v in e.errors]
            response = rest.JSON(body, status_code=status)
            ERRORS.labels(route, str(status)).inc()
        elapsed = time.perf_counter() - start
        LATENCY.labels(route, str(response.status_code)).observe(elapsed)
        touched = getattr(request.state, "featuresets", None)
        if touched:
            request.app.state.server.window.record(
                rest.branch_of(request), touched, elapsed, response.status_code >= 400
            )
        response.headers["x-request-id"] = rid
        response.headers["x-fennel-server"] = request.app.state.server.window.server
        if log.isEnabledFor(logging.INFO):  # off by default: the line costs a JSON encode
            log.info(json.dumps({"request_id": rid, "route": route,
                                 "status": response.status_code,
                                 "ms": round(elapsed * 1000, 3), "token": who}))  # fmt: skip
        return response

    return run


async def health(request: Request) -> Response:
    server: Server = request.app.state.server
    return rest.JSON({"ok": True, "branches": len(server.state.graphs),
                      "routes": len(server.state.routes.address)})  # fmt: skip


async def metrics(request: Request) -> Response:
    """This process's metrics; with several worker processes (``serve --workers``), all of
    theirs, merged from the directory they write to (prometheus-client's multiprocess mode)."""
    shared = os.environ.get(METRICS_DIR_ENV)
    if not shared:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
    registry = CollectorRegistry()
    MultiProcessCollector(registry, shared)
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


async def openapi(request: Request) -> Response:
    return rest.JSON(document())


@lru_cache(maxsize=2048)
def _operations(query: str) -> tuple[str, ...]:
    try:
        doc = gql.parse(query, max_tokens=graphql.MAX_TOKENS)
    except gql.GraphQLError:
        return ()
    return tuple(
        d.operation.value for d in doc.definitions if isinstance(d, gql.OperationDefinitionNode)
    )


async def graphql_endpoint(request: Request) -> Response:
    server: Server = request.app.state.server
    principal = request.state.principal
    branch = rest.branch_of(request)
    body = await rest.body_json(request)
    try:
        query = request.app.state.persisted.document(body.get("query"), body.get("extensions"))
    except PersistedQueryNotFound:
        return rest.JSON(persisted.not_found_body())
    variables = body.get("variables")
    if not isinstance(query, str) or not query.strip():
        raise BadRequest("query: a GraphQL document (string) is required")
    if len(query) > MAX_QUERY_CHARS:
        raise BadRequest(f"query: at most {MAX_QUERY_CHARS} characters")
    if variables is not None and not isinstance(variables, dict):
        raise BadRequest("variables: must be a JSON object")
    ops = _operations(query)
    principal.require("log" if "mutation" in ops else "query", branch)
    graph = server.state.graph(branch)
    served = request.app.state.schemas.of(graph)
    op = body.get("operationName")
    if op is not None and not isinstance(op, str):
        raise BadRequest("operationName: must be a string (the operation to run) or absent")
    compiled = request.app.state.compiled.of(graph.name, graph.head, served, query, op)
    if compiled is not None:
        ctx = graphql.Context(server, principal, branch, graph)
        data = await compiled.run(ctx, variables)
        if data is not None:
            request.state.featuresets = ctx.touched
            return rest.JSON({"data": data})
    ctx = graphql.Context(server, principal, branch, graph)
    try:
        result = await served.schema.execute(query, variable_values=variables, context_value=ctx,
                                             operation_name=op)  # fmt: skip
    except (CannotGetOperationTypeError, InvalidOperationTypeError) as e:  # not GraphQL errors
        named = f"named {op!r}" if op else "to run (several: name one in operationName)"
        raise BadRequest(f"operationName: the document has no operation {named}") from e
    request.state.featuresets = ctx.touched
    payload: dict[str, Any] = {"data": result.data}
    status = 200
    if result.errors:
        payload["errors"] = [{"message": e.message, "path": e.path} for e in result.errors]
        originals = [e.original_error for e in result.errors]
        auth = [o for o in originals if isinstance(o, AuthError)]
        unavailable = [o for o in originals if isinstance(o, EngineUnavailable)]
        status = auth[0].status if auth else 503 if unavailable else 200
        if result.data is None and not auth and not unavailable:
            status = 400  # the document itself was refused (syntax, validation, limits)
    return rest.JSON(payload, status_code=status)


def app_from_env() -> Starlette:
    """The app of one of ``serve --workers N`` processes: settings from the environment, as
    every process of the platform reads them, executors from ``EXECUTORS_ENV``."""
    return build_app(get_settings(), processes=int(os.environ.get(EXECUTORS_ENV, "2")))


def build_app(settings: Settings, processes: int = 2) -> Starlette:
    server = Server(settings, processes=processes)

    @asynccontextmanager
    async def lifespan(app: Starlette):  # type: ignore[no-untyped-def]
        server.start()
        freeze_startup_heap()
        yield
        await server.runner.aclose()
        server.close()

    v1 = "/api/v1"
    routes = [
        Route("/health", guarded(health, "health", public=True)),
        Route("/metrics", guarded(metrics, "metrics", public=True)),
        Route("/openapi.json", guarded(openapi, "openapi", public=True)),
        Route(f"{v1}/query", guarded(rest.query, "query"), methods=["POST"]),
        Route("/graphql", guarded(graphql_endpoint, "graphql"), methods=["POST"]),
        Route(f"{v1}/explain", guarded(rest.explain_query, "explain"), methods=["POST"]),
        Route(v1 + "/dataset/{name}/lookup", guarded(rest.lookup, "lookup"), methods=["POST"]),
        Route(v1 + "/dataset/{name}/inspect", guarded(rest.inspect, "inspect"), methods=["GET"]),
        Route(v1 + "/dataset/{name}/rows", guarded(rest.dataset_rows, "rows"), methods=["GET"]),
        Route(v1 + "/dataset/{name}/erase", guarded(rest.erase, "erase"), methods=["POST"]),
        Route(f"{v1}/log", guarded(rest.log, "log"), methods=["POST"]),
        Route(v1 + "/log/{webhook}/{endpoint}", guarded(rest.log, "log"), methods=["POST"]),
        Route(f"{v1}/commit", guarded(rest.commit, "commit"), methods=["POST"]),
        Route(f"{v1}/sleep", guarded(rest.sleep, "sleep"), methods=["POST"]),
        Route(f"{v1}/init", guarded(rest.init_branch, "init"), methods=["POST"]),
        Route(f"{v1}/delete", guarded(rest.delete_branch, "delete"), methods=["POST"]),
        Route(f"{v1}/branch/list", guarded(rest.list_branches, "branches"), methods=["GET"]),
        Route(
            f"{v1}/query_offline", guarded(rest.query_offline, "query_offline"), methods=["POST"]
        ),
        Route(
            f"{v1}/query_offline/status",
            guarded(rest.offline_status, "offline_status"),
            methods=["GET"],
        ),
        Route(
            f"{v1}/query_offline/cancel",
            guarded(rest.offline_cancel, "offline_cancel"),
            methods=["POST"],
        ),
        Route(
            v1 + "/query_offline/{request_id}",
            guarded(rest.offline_status, "offline_status"),
            methods=["GET"],
        ),
        Route(
            v1 + "/query_offline/{request_id}/cancel",
            guarded(rest.offline_cancel, "offline_cancel"),
            methods=["POST"],
        ),
        Route(
            v1 + "/query_offline/{request_id}/result",
            guarded(rest.offline_result, "offline_result"),
            methods=["GET"],
        ),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.server = server
    app.state.schemas = graphql.Schemas()
    app.state.compiled = graphql_fast.CompiledDocuments()
    app.state.persisted = persisted.PersistedQueries(max_chars=MAX_QUERY_CHARS)
    return app
