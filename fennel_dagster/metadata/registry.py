"""The job registry and the engine fleet in Postgres: the one place their SQL lives.

Jobs and their partitions are written by the commit protocol (``register_job`` at the
commit point); engines, lookups, the client and Dagster only read them, always as typed
``wire.plan`` job specs. Engines register with a heartbeat lease; each runner reports its
own heartbeat, which the supervisor and the Dagster engine sensor use to judge liveness. A
runner that hits a permanent error records it (``record_failure``): supervisors and the
keep-alive sensor leave that partition stopped, and the reason is shown until the job
changes (a new commit) or the record is cleared. Outages a process rode out are recorded
once it is back (``record_outage``), for Dagster to show.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import psycopg
from psycopg.types.json import Jsonb

from fennel_dagster.wire import plan
from fennel_dagster.wire.codec import from_jsonable, to_jsonable


@dataclass(frozen=True)
class JobRow:
    hash: str
    name: str
    kind: plan.JobKind
    partitions: int
    spec: plan.JobSpec

    def to_json(self) -> str:
        """For handing a job to a child process (``from_json`` reads it back)."""
        return json.dumps({"hash": self.hash, "spec": to_jsonable(self.spec)})

    @classmethod
    def from_json(cls, raw: str) -> JobRow:
        doc = json.loads(raw)
        return of_spec(doc["hash"], _decode(doc["spec"]))


@dataclass(frozen=True)
class JobFailure:
    job_hash: str
    partition: int
    owner: str
    reason: str


def of_spec(job_hash: str, job: plan.JobSpec) -> JobRow:
    return JobRow(job_hash, job.name, job.KIND, job.partitions, job)


def _decode(raw: object) -> plan.JobSpec:
    job = from_jsonable(raw)
    if not isinstance(job, plan.JOB_SPECS):
        raise TypeError(f"job registry row holds {type(job).__name__}, not a job spec")
    return job


def webhook_inboxes(jobs: Sequence[JobRow], webhook: str, endpoint: str) -> dict[str, int]:
    """Inbox topic -> partitions of every source job reading ``webhook.endpoint``: where rows
    logged to that endpoint go."""
    return {
        j.spec.webhook.topic: j.spec.webhook.partitions
        for j in jobs
        if isinstance(j.spec, plan.SourceJobSpec)
        and j.spec.webhook is not None
        and (j.spec.webhook.webhook, j.spec.webhook.endpoint) == (webhook, endpoint)
    }


def register_job(conn: psycopg.Connection, job_hash: str, job: plan.JobSpec) -> None:
    """Make ``job`` runnable (idempotent): its row and one row per partition."""
    conn.execute(
        "INSERT INTO jobs (hash, name, kind, partitions, spec) VALUES (%s, %s, %s, %s, %s) "
        "ON CONFLICT (hash) DO NOTHING",
        (job_hash, job.name, job.KIND, job.partitions, Jsonb(to_jsonable(job))),
    )
    conn.execute(
        "INSERT INTO job_partitions (job_hash, partition) "
        "SELECT %s, p FROM generate_series(0, %s - 1) p ON CONFLICT DO NOTHING",
        (job_hash, job.partitions),
    )


def unregister_jobs(conn: psycopg.Connection, hashes: list[str]) -> None:
    """Engines stop these jobs' runners when they notice. Their partitions, failures, runner
    heartbeats and stream statistics go with them (foreign keys, ``ON DELETE CASCADE``)."""
    conn.execute("DELETE FROM jobs WHERE hash = ANY(%s)", (hashes,))


def branch_jobs(
    conn: psycopg.Connection, branch: str, decoded: dict[tuple[str, str], JobRow] | None = None
) -> list[JobRow]:
    """The jobs a branch references (through its asset refs). ``decoded``: specs decoded by
    earlier calls, by their text, so a client that reads them per lookup decodes each once."""
    rows = conn.execute(
        "SELECT j.hash, j.spec::text FROM jobs j JOIN refs r ON r.hash = j.hash "
        "WHERE r.branch = %s ORDER BY j.name",
        (branch,),
    ).fetchall()
    if decoded is None:
        return [of_spec(h, _decode(json.loads(s))) for h, s in rows]
    if len(decoded) > _DECODED_MAX:
        decoded.clear()
    out = []
    for h, s in rows:
        job = decoded.get((h, s))
        if job is None:
            job = decoded[(h, s)] = of_spec(h, _decode(json.loads(s)))
        out.append(job)
    return out


_DECODED_MAX = 4096  # a client's cache of decoded specs: emptied when past this


def jobs_by_branch(conn: psycopg.Connection) -> dict[str, list[JobRow]]:
    """Every branch's jobs (a job shared by branches is listed under each), in one query."""
    rows = conn.execute(
        "SELECT DISTINCT r.branch, j.hash, j.spec FROM jobs j JOIN refs r ON r.hash = j.hash "
        "ORDER BY r.branch"
    ).fetchall()
    decoded: dict[str, JobRow] = {}
    out: dict[str, list[JobRow]] = {}
    for branch, h, s in rows:
        if h not in decoded:
            decoded[h] = of_spec(h, _decode(s))
        out.setdefault(branch, []).append(decoded[h])
    return out


def record_failure(
    conn: psycopg.Connection, job_hash: str, partition: int, owner: str, reason: str
) -> None:
    conn.execute(
        """INSERT INTO job_failures (job_hash, partition, owner, reason, failed_at)
           VALUES (%s, %s, %s, %s, now())
           ON CONFLICT (job_hash, partition) DO UPDATE SET owner = EXCLUDED.owner,
             reason = EXCLUDED.reason, failed_at = now()""",
        (job_hash, partition, owner, reason),
    )


def clear_failure(conn: psycopg.Connection, job_hash: str, partition: int) -> None:
    conn.execute(
        "DELETE FROM job_failures WHERE job_hash = %s AND partition = %s", (job_hash, partition)
    )


def failures(conn: psycopg.Connection) -> dict[tuple[str, int], JobFailure]:
    """(job hash, partition) -> why that partition stopped for good."""
    rows = conn.execute("SELECT job_hash, partition, owner, reason FROM job_failures").fetchall()
    return {(h, int(p)): JobFailure(h, int(p), o, r) for h, p, o, r in rows}


@dataclass(frozen=True)
class EngineRow:
    id: str
    address: str


def list_jobs(conn: psycopg.Connection) -> list[JobRow]:
    rows = conn.execute("SELECT hash, spec FROM jobs ORDER BY name").fetchall()
    return [of_spec(h, _decode(s)) for h, s in rows]


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
    """The runner's beat; none for a job no longer registered (it is being deleted)."""
    conn.execute(
        """INSERT INTO runner_heartbeats (job_hash, partition, owner, pid, heartbeat_at)
           SELECT %s, %s, %s, %s, now() WHERE EXISTS (SELECT 1 FROM jobs WHERE hash = %s)
           ON CONFLICT (job_hash, partition) DO UPDATE SET owner = EXCLUDED.owner,
             pid = EXCLUDED.pid, heartbeat_at = now()""",
        (job_hash, partition, owner, pid, job_hash),
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


@dataclass(frozen=True)
class OutageRow:
    process: str
    service: str
    began_at: datetime
    seconds: float
    error: str


def record_outage(conn: psycopg.Connection, row: OutageRow) -> None:
    conn.execute(
        "INSERT INTO outages (process, service, began_at, seconds, error) "
        "VALUES (%s, %s, %s, %s, %s)",
        (row.process, row.service, row.began_at, row.seconds, row.error[:2000]),
    )


def recent_outages(conn: psycopg.Connection, within_s: float) -> list[OutageRow]:
    rows = conn.execute(
        "SELECT process, service, began_at, seconds, error FROM outages "
        "WHERE began_at > now() - make_interval(secs => %s) ORDER BY began_at",
        (within_s,),
    ).fetchall()
    return [OutageRow(p, s, b, float(sec), e) for p, s, b, sec, e in rows]
