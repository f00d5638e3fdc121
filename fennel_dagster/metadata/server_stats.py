"""Query servers' per-featureset request statistics, as the metadata store keeps them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import psycopg


@dataclass(frozen=True)
class FeaturesetStats:
    server: str
    branch: str
    featureset: str
    window_s: float
    requests: int
    errors: int
    p50_ms: float
    p99_ms: float


def publish(conn: psycopg.Connection, rows: Iterable[FeaturesetStats]) -> None:
    for r in rows:
        conn.execute(
            """INSERT INTO query_server_stats (server, branch, featureset, window_s, requests,
                 errors, p50_ms, p99_ms, updated_at)
               VALUES (%s, %s, %s, %s, %s, %s, %s, %s, now())
               ON CONFLICT (server, branch, featureset) DO UPDATE SET
                 window_s = EXCLUDED.window_s, requests = EXCLUDED.requests,
                 errors = EXCLUDED.errors, p50_ms = EXCLUDED.p50_ms, p99_ms = EXCLUDED.p99_ms,
                 updated_at = now()""",
            (r.server, r.branch, r.featureset, r.window_s, r.requests, r.errors,
             r.p50_ms, r.p99_ms),
        )  # fmt: skip


def fresh(conn: psycopg.Connection, within_s: float) -> list[FeaturesetStats]:
    rows = conn.execute(
        "SELECT server, branch, featureset, window_s, requests, errors, p50_ms, p99_ms "
        "FROM query_server_stats WHERE updated_at > now() - make_interval(secs => %s) "
        "ORDER BY branch, featureset, server",
        (within_s,),
    ).fetchall()
    return [FeaturesetStats(*r) for r in rows]
