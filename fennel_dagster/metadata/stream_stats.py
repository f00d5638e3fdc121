"""Runners' reports of their streams, as the metadata store keeps them (``stream_stats``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import psycopg


@dataclass(frozen=True)
class Progress:
    """What a runner did since its last report (counts) and where it stands (lag, newest)."""

    messages: int = 0
    rows_out: int = 0
    bad_rows: int = 0
    lag: int | None = None  # None: unknown (not fetched yet, or not measurable)
    newest_event_us: int | None = None  # microseconds since the epoch, UTC


@dataclass(frozen=True)
class StreamStats:
    job_hash: str
    partition: int
    messages: int
    rows_out: int
    bad_rows: int
    lag: int | None  # None: unknown; never taken for caught up
    newest_event: datetime | None
    age_s: float  # seconds since the runner last reported


def report(conn: psycopg.Connection, job_hash: str, partition: int, p: Progress) -> None:
    """Adds the counts; the lag is the one measured last (None: unknown, stored as such, so
    a restarted runner that has not fetched yet is not shown at its last life's lag); the
    newest event time only moves forward. Nothing for a job no longer registered."""
    conn.execute(
        """INSERT INTO stream_stats AS s (job_hash, partition, messages, rows_out, bad_rows, lag,
             newest_event, reported_at)
           SELECT %s, %s, %s, %s, %s, %s,
             CASE WHEN %s::bigint IS NULL THEN NULL
                  ELSE to_timestamp(%s::bigint / 1e6) END, now()
           WHERE EXISTS (SELECT 1 FROM jobs WHERE hash = %s)
           ON CONFLICT (job_hash, partition) DO UPDATE SET
             messages = s.messages + EXCLUDED.messages,
             rows_out = s.rows_out + EXCLUDED.rows_out,
             bad_rows = s.bad_rows + EXCLUDED.bad_rows,
             lag = EXCLUDED.lag,
             newest_event = greatest(s.newest_event, EXCLUDED.newest_event),
             reported_at = now()""",
        (job_hash, partition, p.messages, p.rows_out, p.bad_rows, p.lag,
         p.newest_event_us, p.newest_event_us, job_hash),
    )  # fmt: skip


def all_stats(conn: psycopg.Connection) -> dict[tuple[str, int], StreamStats]:
    rows = conn.execute(
        "SELECT job_hash, partition, messages, rows_out, bad_rows, lag, newest_event, "
        "extract(epoch FROM now() - reported_at) FROM stream_stats"
    ).fetchall()
    return {(r[0], int(r[1])): StreamStats(r[0], int(r[1]), int(r[2]), int(r[3]), int(r[4]),
                                           None if r[5] is None else int(r[5]), r[6],
                                           float(r[7])) for r in rows}  # fmt: skip
