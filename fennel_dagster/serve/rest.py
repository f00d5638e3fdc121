"""Fennel's HTTP API (``/api/v1/...``), so Fennel's REST users move by changing the URL.

Each handler authenticates the bearer token, checks its scope on the branch named by the
``X-FENNEL-BRANCH`` header (default ``main``), then reads from the in-memory serving state;
errors are JSON ``{"error": ...}`` with a 4xx status that names the field at fault.
"""

from __future__ import annotations

import asyncio
from fnmatch import fnmatchcase
from typing import Any

import orjson
import pandas as pd
from starlette.requests import Request
from starlette.responses import Response

from fennel_dagster.api import LogResult, check_input_columns
from fennel_dagster.ops.rows import base_type
from fennel_dagster.query.lookup import as_key_types
from fennel_dagster.serve.auth import Principal, entities_of
from fennel_dagster.serve.frames import BadRequest, columns, frame, timestamps, to_json_columns
from fennel_dagster.serve.queries import explain
from fennel_dagster.serve.server import Server
from fennel_dagster.wire import codec, spec

BRANCH_HEADER = "x-fennel-branch"
MAX_BODY = 32 * 1024 * 1024


class JSON(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY)


def branch_of(request: Request) -> str:
    return request.headers.get(BRANCH_HEADER) or "main"


async def body_json(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if len(raw) > MAX_BODY:
        raise BadRequest(f"request body over {MAX_BODY // 2**20} MiB; split the request")
    try:
        value = orjson.loads(raw or b"{}")
    except orjson.JSONDecodeError as e:
        raise BadRequest(f"request body is not JSON: {e}") from None
    if not isinstance(value, dict):
        raise BadRequest("request body must be a JSON object")
    return value


def _names(body: dict[str, Any], key: str) -> list[str]:
    value = body.get(key)
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise BadRequest(
            f'{key!r} must be a non-empty list of feature names ("Featureset.feature")'
        )
    return value


async def query(request: Request) -> Response:
    server: Server = request.app.state.server
    principal: Principal = request.state.principal
    branch = branch_of(request)
    principal.require("query", branch)
    body = await body_json(request)
    if body.get("log") or body.get("workflow") is not None or body.get("sampling_rate") is not None:
        raise BadRequest(
            "log/workflow/sampling_rate: logging computed features is not supported; drop them"
        )
    graph = server.state.graph(branch)
    data = columns(body.get("data"), "data")
    check_input_columns(_names(body, "inputs"), data)  # first, as Fennel does
    plan = server.runner.plan(graph, _names(body, "inputs"), _names(body, "outputs"))
    principal.require_entities(entities_of(plan))
    request.state.featuresets = {o.split(".", 1)[0] for o in plan.outputs}
    missing = [i for i in plan.inputs if i not in data]
    if missing:
        raise BadRequest(f"data: missing input column(s) {', '.join(missing)}")
    types = server.feature_types(graph)
    payload: Any = await server.runner.run_json(
        graph, plan, {i: data[i] for i in plan.inputs}, body.get("timestamps"), types,
        server.state.routes, server.state.service_secret,
    )  # fmt: skip
    if request.query_params.get("typed") == "true":
        payload = {"data": payload, "types": {o: codec.to_jsonable(types[o]) for o in plan.outputs}}
    return JSON(payload)


async def explain_query(request: Request) -> Response:
    server: Server = request.app.state.server
    principal: Principal = request.state.principal
    branch = branch_of(request)
    principal.require("query", branch)
    body = await body_json(request)
    plan = server.runner.plan(
        server.state.graph(branch), _names(body, "inputs"), _names(body, "outputs")
    )
    principal.require_entities(entities_of(plan))
    return JSON({"steps": [s.__dict__ for s in explain(plan)], "outputs": list(plan.outputs)})


async def lookup(request: Request) -> Response:
    server: Server = request.app.state.server
    principal: Principal = request.state.principal
    branch = branch_of(request)
    principal.require("query", branch)
    name = request.path_params["name"]
    principal.require_entities([name])
    body = await body_json(request)
    graph = server.state.graph(branch)
    job = graph.serving_job(name)
    ds = job.spec.dataset
    types = {f.name: f.dtype for f in ds.fields}
    fields = body.get("fields") or None
    if fields is not None and (
        not isinstance(fields, list)
        or any(not isinstance(f, str) or f not in types for f in fields)
    ):
        raise BadRequest(f"fields: expected a list of fields of {name} ({', '.join(types)})")
    data = columns(body.get("keys", []), "keys")
    missing = [k for k in ds.keys if k not in data]
    if missing:
        raise BadRequest(
            f"keys: {name} is keyed by {', '.join(ds.keys)}; missing {', '.join(missing)}"
        )
    keys = frame(coerced_keys({k: data[k] for k in ds.keys}, types), types, "keys")
    ts = timestamps(body.get("timestamps"), len(keys), "timestamps")
    df, found = await server.runner.lookup(
        job, keys, ts, fields, server.state.routes, server.state.service_secret
    )
    payload = {"data": to_json_columns(df), "found": [bool(f) for f in found]}
    if request.query_params.get("typed") == "true":
        payload["types"] = {c: codec.to_jsonable(types[c]) for c in df.columns}
    return JSON(payload)


def coerced_keys(data: dict[str, list[Any]], types: dict[str, Any]) -> dict[str, list[Any]]:
    """Key values cast to their fields' types as every client's lookups cast them (an int 1
    asked of a str key is "1", ``query.lookup.as_key_types``); what does not cast is refused
    by ``frame``, naming the field, as is a null. Datetimes are left to ``frame``, which reads
    Fennel's epoch milliseconds."""
    whole = [k for k, v in data.items()  # nulls are refused; datetimes read as frame reads them
             if all(x is not None for x in v)
             and not isinstance(base_type(types[k]), spec.TimestampType)]  # fmt: skip
    raw = pd.DataFrame({k: pd.Series(data[k], dtype=object) for k in whole})
    cast = as_key_types(raw, {k: types[k] for k in whole})
    return {k: cast[k].tolist() if k in whole else v for k, v in data.items()}


async def inspect(request: Request) -> Response:
    """Fennel's ``GET /dataset/{name}/inspect?n=``: the dataset's ``n`` newest rows."""
    raw = request.query_params.get("n", "10")
    if not raw.isdigit() or int(raw) < 1:
        raise BadRequest(f"n: the number of rows to show, a positive integer (got {raw!r})")
    return await _rows(request, int(raw))


async def dataset_rows(request: Request) -> Response:
    """Every row of a dataset (what the mock's ``get_dataset_df`` answers)."""
    return await _rows(request, None)


async def _rows(request: Request, newest: int | None) -> Response:
    server: Server = request.app.state.server
    principal: Principal = request.state.principal
    branch = branch_of(request)
    principal.require("query", branch)
    name = request.path_params["name"]
    principal.require_entities([name])
    df, ds = await asyncio.get_running_loop().run_in_executor(
        server.runner.threads, server.dataset_rows, branch, name, newest
    )
    types = {f.name: f.dtype for f in ds.fields}
    return JSON({"data": to_json_columns(df),
                 "types": {c: codec.to_jsonable(types[c]) for c in df.columns}})  # fmt: skip


async def erase(request: Request) -> Response:
    """Fennel's ``POST /dataset/{name}/erase`` with ``erase_keys`` (rows or columns)."""
    server: Server = request.app.state.server
    principal: Principal = request.state.principal
    branch = branch_of(request)
    principal.require("commit", branch)
    name = request.path_params["name"]
    principal.require_entities([name])
    body = await body_json(request)
    keys = pd.DataFrame(columns(body.get("erase_keys"), "erase_keys"))
    reply = await asyncio.get_running_loop().run_in_executor(
        server.runner.threads, server.erase, branch, name, keys
    )
    return JSON(reply)


async def log(request: Request) -> Response:
    server: Server = request.app.state.server
    principal: Principal = request.state.principal
    branch = branch_of(request)
    principal.require("log", branch)
    body = await body_json(request)
    webhook = request.path_params.get("webhook") or body.get("webhook")
    endpoint = request.path_params.get("endpoint") or body.get("endpoint")
    if not isinstance(webhook, str) or not isinstance(endpoint, str):
        raise BadRequest("webhook and endpoint: name both (in the path or the body)")
    data = columns(body.get("data"), "data")
    rows = [dict(zip(data, vals, strict=True)) for vals in zip(*data.values(), strict=True)]
    result: LogResult = await asyncio.get_running_loop().run_in_executor(
        server.runner.threads,
        server.log_rows,
        branch,
        webhook,
        endpoint,
        rows,
        lambda reached: principal.require("log", reached),
    )
    return JSON(result.json())


async def list_branches(request: Request) -> Response:
    server: Server = request.app.state.server
    principal: Principal = request.state.principal
    names = [b for b in sorted(server.state.graphs)
             if any(fnmatchcase(b, p) for p in principal.token.branches)]  # fmt: skip
    return JSON({"branches": [{"name": b} for b in names]})


async def init_branch(request: Request) -> Response:
    """Fennel's ``/init``: an empty branch, or a clone with ``clone_from``."""
    server: Server = request.app.state.server
    principal: Principal = request.state.principal
    branch = branch_of(request)
    principal.require("commit", branch)
    body = await body_json(request)
    source = body.get("clone_from")
    if source is not None:
        principal.require("query", str(source))
    await asyncio.get_running_loop().run_in_executor(
        server.runner.threads, server.init_branch, branch, source
    )
    return JSON({"branch": branch})


async def delete_branch(request: Request) -> Response:
    server: Server = request.app.state.server
    principal: Principal = request.state.principal
    branch = branch_of(request)
    principal.require("commit", branch)
    await asyncio.get_running_loop().run_in_executor(
        server.runner.threads, server.delete_branch, branch
    )
    return JSON({"deleted": branch})


async def commit(request: Request) -> Response:
    """The wire bytes of a ``CommitSpec`` (what ``Client.commit`` sends)."""
    server: Server = request.app.state.server
    principal: Principal = request.state.principal
    branch = branch_of(request)
    principal.require("commit", branch)
    raw = await request.body()
    flags = {k: request.query_params.get(k, d) == "true"
             for k, d in (("preview", "false"), ("backfill", "true"))}  # fmt: skip
    ready_timeout = _seconds(request.query_params.get("ready_timeout", "0"), "ready_timeout", 0)
    summary = await asyncio.to_thread(
        server.commit, branch, raw, flags["preview"], flags["backfill"], ready_timeout
    )
    return JSON(summary)


def _seconds(raw: object, name: str, least: float, most: float = 3600.0) -> float:
    try:
        value = float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        value = float("nan")
    if not least <= value <= most:
        raise BadRequest(f"{name}: seconds between {least:g} and {most:g}, not {raw!r}")
    return value


async def sleep(request: Request) -> Response:
    """The barrier (``client.sleep()``): answers once every stream job of the branch has
    processed everything logged before the request, or 504 naming the job partitions still
    behind after ``timeout`` seconds (body ``{"timeout": s}``, default 60)."""
    server: Server = request.app.state.server
    principal: Principal = request.state.principal
    branch = branch_of(request)
    principal.require("query", branch)
    body = await body_json(request)
    timeout = _seconds(body.get("timeout", 60), "timeout", 0.1)
    server.state.graph(branch)  # an unknown branch: 404 now
    return JSON(await asyncio.to_thread(server.sleep, branch, timeout))


# ---------------------------------------------------------------- offline queries


async def query_offline(request: Request) -> Response:
    """Record an offline query (run by the deployment's Dagster ``fennel_offline_query``
    job); the reply is its status, with ``request_id`` to follow it by."""
    server: Server = request.app.state.server
    principal: Principal = request.state.principal
    branch = branch_of(request)
    principal.require("query", branch)
    body = await body_json(request)
    graph = server.state.graph(branch)
    inputs, outputs = _names(body, "inputs"), _names(body, "outputs")
    plan = server.runner.plan(graph, inputs, outputs)  # unknown features: a 400 now, not later
    principal.require_entities(entities_of(plan))
    ts_col = body.get("timestamp_column")
    if not isinstance(ts_col, str) or not ts_col:
        raise BadRequest("timestamp_column: name the input column holding each row's time")
    df = None
    if body.get("data") is not None:
        data = columns(body["data"], "data")
        if ts_col not in data:
            raise BadRequest(f"data: no timestamp column {ts_col!r} (timestamp_column)")
        types = server.feature_types(graph)
        df = frame({i: data[i] for i in plan.inputs if i in data}, types, "data")
        df[ts_col] = timestamps(data[ts_col], len(df), ts_col).to_numpy()
    status = await asyncio.get_running_loop().run_in_executor(
        server.runner.threads, server.query_offline, branch, body, df
    )
    return JSON(status)


def _request_id(request: Request) -> int:
    raw = request.path_params.get("request_id") or request.query_params.get("request_id")
    if raw is None or not str(raw).isdigit():
        raise BadRequest("request_id: the id query_offline returned (an integer)")
    return int(raw)


async def offline_status(request: Request) -> Response:
    server: Server = request.app.state.server
    status = await asyncio.get_running_loop().run_in_executor(
        server.runner.threads, server.offline_status, _request_id(request), False
    )
    request.state.principal.require("query", status["branch"])
    return JSON(status)


async def offline_cancel(request: Request) -> Response:
    server: Server = request.app.state.server
    rid = _request_id(request)
    status = await asyncio.get_running_loop().run_in_executor(
        server.runner.threads, server.offline_status, rid, False
    )
    request.state.principal.require("query", status["branch"])
    status = await asyncio.get_running_loop().run_in_executor(
        server.runner.threads, server.offline_status, rid, True
    )
    return JSON(status)


async def offline_result(request: Request) -> Response:
    """A finished query's output as columns (up to ``MAX_RESULT_ROWS``: larger results are
    read from ``output_uri`` on S3, not through the server)."""
    server: Server = request.app.state.server
    rid = _request_id(request)
    status = await asyncio.get_running_loop().run_in_executor(
        server.runner.threads, server.offline_status, rid, False
    )
    request.state.principal.require("query", status["branch"])
    out = await asyncio.get_running_loop().run_in_executor(
        server.runner.threads, server.offline_result, status
    )
    types = server.feature_types(server.state.graph(status["branch"]))
    ts = status["request"]["timestamp_column"]
    return JSON(
        {
            "data": to_json_columns(out),
            "types": {c: codec.to_jsonable(types[c]) for c in out.columns if c != ts},
        }
    )
