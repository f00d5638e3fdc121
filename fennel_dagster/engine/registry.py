"""The job registry and the engine fleet, as engines see them in Postgres.

Jobs and their partitions are written by the commit protocol; engines only read them.
Engines register with a heartbeat lease; each runner reports its own heartbeat, which the
supervisor and the Dagster engine sensor use to judge liveness.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import psycopg


@dataclass(frozen=True)
class JobRow:
    hash: str
    name: str
    kind: str
    partitions: int
    spec: dict[str, Any]

    def to_json(self) -> str:
        return json.dumps(
            {"hash": self.hash, "name": self.name, "kind": self.kind,
             "partitions": self.partitions, "spec": self.spec}
        )  # fmt: skip

    @classmethod
    def from_json(cls, raw: str) -> JobRow:
        return cls(**json.loads(raw))


@dataclass(frozen=True)
class EngineRow:
    id: str
    address: str


def list_jobs(conn: psycopg.Connection) -> list[JobRow]:
    rows = conn.execute(
        "SELECT hash, name, kind, partitions, spec FROM jobs ORDER BY name"
    ).fetchall()
    return [JobRow(h, n, k, int(p), s) for h, n, k, p, s in rows]


def job_exists(conn: psycopg.Connection, job_hash: str) -> bool:
    return conn.execute("SELECT 1 FROM jobs WHERE hash = %s", (job_hash,)).fetchone() is not None


def heartbeat_engine(
    conn: psycopg.Connection, engine_id: str, address: str, lease_s: float
) -> None:
    conn.execute(
        """INSERT INTO engines (id, address, heartbeat_at, lease_until)
           VALUES (%s, %s, now(), now() + make_interval(secs => %s))
           ON CONFLICT (id) DO UPDATE SET address = EXCLUDED.address,
             heartbeat_at = now(), lease_until = EXCLUDED.lease_until""",
        (engine_id, address, lease_s),
    )


def live_engines(conn: psycopg.Connection) -> list[EngineRow]:
    rows = conn.execute(
        "SELECT id, address FROM engines WHERE lease_until > now() ORDER BY id"
    ).fetchall()
    return [EngineRow(i, a) for i, a in rows]


def deregister_engine(conn: psycopg.Connection, engine_id: str) -> None:
    conn.execute("DELETE FROM engines WHERE id = %s", (engine_id,))


def heartbeat_runner(
    conn: psycopg.Connection, job_hash: str, partition: int, owner: str, pid: int
) -> None:
    conn.execute(
        """INSERT INTO runner_heartbeats (job_hash, partition, owner, pid, heartbeat_at)
           VALUES (%s, %s, %s, %s, now())
           ON CONFLICT (job_hash, partition) DO UPDATE SET owner = EXCLUDED.owner,
             pid = EXCLUDED.pid, heartbeat_at = now()""",
        (job_hash, partition, owner, pid),
    )


def runner_owners(conn: psycopg.Connection) -> dict[tuple[str, int], tuple[str, float]]:
    """(job hash, partition) -> (owner, seconds since its last heartbeat)."""
    rows = conn.execute(
        "SELECT job_hash, partition, owner, extract(epoch FROM now() - heartbeat_at) "
        "FROM runner_heartbeats"
    ).fetchall()
    return {(h, int(p)): (o, float(age)) for h, p, o, age in rows}


def rendezvous_owner(job_hash: str, partition: int, engines: list[str]) -> str | None:
    """Highest-random-weight hashing: each (job, partition) goes to the engine with the
    highest hash; adding or removing an engine moves only the partitions it wins or held."""
    if not engines:
        return None
    return max(
        engines,
        key=lambda e: hashlib.blake2b(
            f"{e}|{job_hash}|{partition}".encode(), digest_size=8
        ).digest(),
    )
