"""The OpenAPI 3.1 document of the HTTP API: the contract clients and fuzzers read."""

from __future__ import annotations

from typing import Any

_COLUMNS = {
    "description": "{column: [values]} (Fennel's to_columnar_json) or a list of row objects",
    "oneOf": [
        {"type": "object", "additionalProperties": {"type": "array", "items": {}}},
        {"type": "array", "items": {"type": "object"}},
    ],
}
_NAMES = {"type": "array", "minItems": 1, "items": {"type": "string"}}
_STAMPS = {"type": "array", "items": {"oneOf": [{"type": "string"}, {"type": "number"}]},
           "description": "one per row: ISO 8601 or epoch milliseconds; default now"}  # fmt: skip
_ERROR = {"type": "object", "properties": {"error": {"type": "string"},
                                           "request_id": {"type": "string"}}}  # fmt: skip
_BRANCH = {"name": "X-FENNEL-BRANCH", "in": "header", "required": False,
           "schema": {"type": "string"}, "description": "branch (default main)"}  # fmt: skip


def _op(
    summary: str, body: dict[str, Any] | None, ok: dict[str, Any], **extra: Any
) -> dict[str, Any]:
    op: dict[str, Any] = {
        "summary": summary,
        "parameters": [_BRANCH, *extra.pop("parameters", [])],
        "security": [{"bearer": []}],
        "responses": {
            "200": {"description": "ok", "content": {"application/json": {"schema": ok}}},
            **{
                code: {"description": why, "content": {"application/json": {"schema": _ERROR}}}
                for code, why in (
                    ("400", "bad input, naming the field"),
                    ("401", "no or bad token"),
                    ("403", "token lacks scope, branch or entity"),
                    ("404", "unknown branch"),
                    ("422", "an extractor failed"),
                    ("503", "an engine partition is unavailable; retry"),
                )
            },
        },  # fmt: skip
    }
    if body is not None:
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
    op.update(extra)
    return op


def _obj(required: list[str], **props: Any) -> dict[str, Any]:
    return {"type": "object", "required": required, "properties": props}


def document() -> dict[str, Any]:
    query_body = _obj(["inputs", "outputs", "data"], inputs=_NAMES, outputs=_NAMES, data=_COLUMNS,
                      timestamps=_STAMPS, log={"type": "boolean", "enum": [False]})  # fmt: skip
    _rows = _obj(["data", "types"], data={"type": "object"}, types={"type": "object"})
    path = lambda n: {"name": n, "in": "path", "required": True, "schema": {"type": "string"}}  # noqa: E731
    return {
        "openapi": "3.1.0",
        "info": {"title": "fennel_dagster query server", "version": "1"},
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "paths": {
            "/api/v1/query": {
                "post": _op(
                    "features for rows of known input features", query_body, {"type": "object"}
                )
            },
            "/api/v1/explain": {
                "post": _op(
                    "the physical plan of a query",
                    _obj(["inputs", "outputs"], inputs=_NAMES, outputs=_NAMES),
                    {"type": "object"},
                )
            },
            "/api/v1/dataset/{name}/lookup": {
                "post": _op(
                    "point-in-time lookup of a keyed dataset",
                    _obj(
                        ["keys"],
                        keys=_COLUMNS,
                        fields={"type": "array", "items": {"type": "string"}},
                        timestamps=_STAMPS,
                    ),
                    _obj(
                        ["data", "found"],
                        data={"type": "object"},
                        found={"type": "array", "items": {"type": "boolean"}},
                    ),
                    parameters=[path("name")],
                )
            },
            "/api/v1/dataset/{name}/inspect": {
                "get": _op(
                    "the newest n rows of a dataset, by its timestamp",
                    None,
                    _rows,
                    parameters=[
                        path("name"),
                        {
                            "name": "n",
                            "in": "query",
                            "required": False,
                            "schema": {"type": "integer", "minimum": 1},
                        },
                    ],
                )
            },
            "/api/v1/dataset/{name}/rows": {
                "get": _op("every row of a dataset", None, _rows, parameters=[path("name")])
            },
            "/api/v1/dataset/{name}/erase": {
                "post": _op(
                    "erase the rows of erase keys (refused: the platform does not erase yet)",
                    _obj(["erase_keys"], erase_keys=_COLUMNS),
                    {"type": "object"},
                    parameters=[path("name")],
                )
            },
            "/api/v1/log": {
                "post": _op(
                    "rows into a webhook endpoint",
                    _obj(
                        ["webhook", "endpoint", "data"],
                        webhook={"type": "string"},
                        endpoint={"type": "string"},
                        data=_COLUMNS,
                    ),
                    {"type": "object"},
                )
            },
            "/api/v1/log/{webhook}/{endpoint}": {
                "post": _op(
                    "rows into a webhook endpoint",
                    _obj(["data"], data=_COLUMNS),
                    {"type": "object"},
                    parameters=[path("webhook"), path("endpoint")],
                )
            },
            "/api/v1/commit": {
                "post": {
                    **_op(
                        "commit the body's definitions to the header's branch",
                        None,
                        {"type": "object"},
                        parameters=[
                            {
                                "name": k,
                                "in": "query",
                                "required": False,
                                "schema": {"type": "string", "enum": ["true", "false"]},
                            }
                            for k in ("preview", "backfill")
                        ]
                        + [
                            {
                                "name": "ready_timeout",
                                "in": "query",
                                "required": False,
                                "description": "seconds to wait for engines to serve the "
                                "branch's partitions (the answer's ready/starting)",
                                "schema": {"type": "number", "minimum": 0, "maximum": 3600},
                            }
                        ],
                    ),
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/octet-stream": {
                                "schema": {
                                    "type": "string",
                                    "format": "binary",
                                    "description": "a wire-encoded CommitSpec (what Client.commit sends)",
                                }
                            }
                        },
                    },
                }
            },
            "/api/v1/sleep": {
                "post": _op(
                    "wait until the branch's jobs processed everything logged before the "
                    "request (504 naming the partitions still behind after timeout seconds)",
                    _obj([], timeout={"type": "number", "minimum": 0.1, "maximum": 3600}),
                    _obj(["caught_up"], caught_up={"type": "boolean"}),
                )
            },
            "/api/v1/branch/list": {
                "get": _op("branches this token may use", None, {"type": "object"})
            },
            "/api/v1/init": {
                "post": _op(
                    "create the header's branch, empty or a clone",
                    {"type": "object", "properties": {"clone_from": {"type": "string"}}},
                    {"type": "object"},
                )
            },
            "/api/v1/delete": {
                "post": _op("delete the header's branch", {"type": "object"}, {"type": "object"})
            },
            "/graphql": {
                "post": _op(
                    "GraphQL",
                    _obj(
                        [],  # the query, or only its hash once the server has it (APQ)
                        query={"type": "string"},
                        variables={"type": "object"},
                        operationName={"type": "string"},
                        extensions=_obj(
                            [],
                            persistedQuery=_obj(
                                ["version", "sha256Hash"],
                                version={"type": "integer", "enum": [1]},
                                sha256Hash={"type": "string", "pattern": "^[0-9a-fA-F]{64}$"},
                            ),
                        ),
                    ),
                    {"type": "object"},
                )
            },
            "/health": {
                "get": {"summary": "liveness", "responses": {"200": {"description": "ok"}}}
            },
        },  # fmt: skip
    }
