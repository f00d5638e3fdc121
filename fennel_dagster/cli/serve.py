"""``fennel-dagster serve``: a query server; ``fennel-dagster token``: its API tokens."""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
from typing import Any

from fennel_dagster.settings import get_settings


def register(sub: Any) -> None:
    p = sub.add_parser("serve", help="run a query server (Fennel's HTTP API and GraphQL)")
    p.add_argument("--host", default=None, help="address to bind (default: the settings' host)")
    p.add_argument("--port", type=int, default=None, help="port (default: settings' serve_port)")
    p.add_argument(
        "--executors",
        type=int,
        default=2,
        help="executor processes for Python extractors, per worker (default 2)",
    )
    p.add_argument("--workers", type=int, default=1,
                   help="server processes sharing the port, one core each (default 1)")  # fmt: skip
    p.set_defaults(func=run)

    t = sub.add_parser("token", help="create, list and revoke the query servers' API tokens")
    tsub = t.add_subparsers(dest="token_command", required=True)
    c = tsub.add_parser("create", help="a new token (printed once; only its hash is kept)")
    c.add_argument("name", help="who or what holds it (shown in logs and `token list`)")
    c.add_argument("--scope", action="append", choices=["query", "log", "commit", "admin"],
                   help="repeatable; default: query")  # fmt: skip
    c.add_argument(
        "--branch", action="append", help="branch pattern (fnmatch), repeatable; default *"
    )
    c.add_argument("--entity", action="append",
                   help="featureset/dataset pattern it may read, repeatable; default *")  # fmt: skip
    c.set_defaults(func=token_create)
    ls = tsub.add_parser("list", help="every token (never the secrets)")
    ls.set_defaults(func=token_list)
    r = tsub.add_parser("revoke", help="revoke a token by id (or the token itself)")
    r.add_argument("id")
    r.set_defaults(func=token_revoke)


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from fennel_dagster.engine.lookup_client import ENGINE_KEEPALIVE_S

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("fennel_dagster.serve.requests").setLevel(logging.WARNING)
    s = get_settings()
    host, port = args.host or s.host, args.port or s.serve_port
    print(f"query server on http://{host}:{port} (GraphQL at /graphql)", flush=True)
    # idle connections kept longer than clients keep theirs (httpx: 5 s), so a client seldom
    # reuses one the server is closing
    options: dict[str, Any] = dict(host=host, port=port, loop="uvloop", http="httptools",
                                   log_level="warning", access_log=False,
                                   timeout_keep_alive=ENGINE_KEEPALIVE_S)  # fmt: skip
    if args.workers <= 1:
        from fennel_dagster.serve.app import build_app

        uvicorn.run(build_app(s, processes=args.executors), **options)
        return 0
    from fennel_dagster.serve.app import EXECUTORS_ENV, METRICS_DIR_ENV
    from fennel_dagster.serve.workers import WorkersFailed, run_workers

    # the workers read everything from the environment; their metrics go to files of one
    # directory, which any worker's /metrics merges
    shared = tempfile.mkdtemp(prefix="fd-serve-metrics-")
    os.environ.update({METRICS_DIR_ENV: shared, EXECUTORS_ENV: str(args.executors)})
    try:
        run_workers(args.workers, options)
    except WorkersFailed as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        shutil.rmtree(shared, ignore_errors=True)
    return 0


def _conn() -> Any:
    from fennel_dagster.metadata.db import connect
    from fennel_dagster.metadata.migrate import migrate

    s = get_settings()
    conn = connect(s, s.pg_schema, autocommit=True)
    migrate(conn)
    return conn


def token_create(args: argparse.Namespace) -> int:
    from fennel_dagster.metadata import tokens

    with _conn() as conn:
        row, token = tokens.create(conn, args.name, tuple(args.scope or ["query"]),
                                   tuple(args.branch or ["*"]), tuple(args.entity or ["*"]))  # fmt: skip
    print(token)
    print(f"# id {row.id}, scopes {','.join(row.scopes)}, branches {','.join(row.branches)}; "
          "shown once: store it now")  # fmt: skip
    return 0


def token_list(args: argparse.Namespace) -> int:
    from fennel_dagster.metadata import tokens

    with _conn() as conn:
        rows = tokens.list_tokens(conn)
    for t in rows:
        state = f"revoked {t.revoked_at:%Y-%m-%d %H:%M}" if t.revoked_at else "live"
        print(f"{t.id}  {t.name:<20} scopes={','.join(t.scopes)} branches={','.join(t.branches)} "
              f"entities={','.join(t.entities)} {state}")  # fmt: skip
    return 0


def token_revoke(args: argparse.Namespace) -> int:
    from fennel_dagster.metadata import tokens

    with _conn() as conn:
        done = tokens.revoke(conn, args.id)
    print("revoked" if done else f"no live token with id {args.id}")
    return 0 if done else 1
