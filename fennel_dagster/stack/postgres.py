"""PostgreSQL from Debian's package: a cluster of our own under the data directory.

``initdb`` refuses to run as root, so when we are root the cluster belongs to the system's
``postgres`` user and its commands run through ``runuser``. The server listens on loopback
only, with its unix socket inside the data directory (never the system cluster's).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
from pathlib import Path

import psycopg

from fennel_dagster.settings import Settings
from fennel_dagster.stack.prereqs import postgres_bin
from fennel_dagster.stack.process import Daemon, StackError, tail, wait_for
from fennel_dagster.stack.service import Health


class Postgres:
    name = "postgres"

    def __init__(self, settings: Settings) -> None:
        self.s = settings
        self.root = settings.home_dir / "postgres"
        self.data = self.root / "data"
        self.sock = self.root / "sock"
        self.daemon = Daemon(
            name=self.name,
            pid_file=settings.run_dir / "postgres.pid",
            log_file=settings.logs_dir / "postgres.log",
            marker=str(self.data),
        )

    def endpoint(self) -> str:
        return f"{self.s.postgres_host}:{self.s.pg_port}"

    def jars_current(self) -> bool:
        return True  # no jars

    def log_path(self) -> str:
        return str(self.daemon.log_file)

    def running_pid(self) -> int | None:
        return self.daemon.pid()

    def _as_owner(self, argv: list[str]) -> list[str]:
        if os.geteuid() != 0:
            return argv
        try:
            pwd.getpwnam("postgres")
        except KeyError as e:
            raise StackError(
                "running as root, PostgreSQL needs a non-root owner but there is no `postgres` "
                "user: apt-get install -y postgresql (creates it)"
            ) from e
        return [shutil.which("runuser") or "runuser", "-u", "postgres", "--", *argv]

    def _chown(self, path: Path) -> None:
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            for p in [path, *path.rglob("*")]:
                os.chown(p, pw.pw_uid, pw.pw_gid)

    def _initdb(self) -> None:
        if (self.data / "PG_VERSION").exists():
            return
        self.root.mkdir(parents=True, exist_ok=True)
        self.sock.mkdir(parents=True, exist_ok=True)
        self._chown(self.root)
        reach = subprocess.run(self._as_owner(["test", "-w", str(self.root)]))
        if reach.returncode != 0:
            raise StackError(
                f"the cluster's owner (user `postgres`) cannot reach {self.root}: make its parent "
                "directories traversable (chmod o+x) or set FENNEL_HOME to a directory it can reach"
            )
        argv = [
            postgres_bin("initdb"), "-D", str(self.data), "-U", self.s.pg_user,
            "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8", "--no-instructions",
        ]  # fmt: skip
        proc = subprocess.run(self._as_owner(argv), capture_output=True, text=True)
        if proc.returncode != 0:
            raise StackError(f"initdb failed for {self.data}:\n{proc.stdout}{proc.stderr}")

    def start(self) -> None:
        self._initdb()
        self.daemon.log_file.parent.mkdir(parents=True, exist_ok=True)
        self.daemon.log_file.touch()
        self._chown(self.daemon.log_file)
        argv = [
            postgres_bin("postgres"), "-D", str(self.data), "-p", str(self.s.pg_port),
            "-h", self.s.postgres_host, "-k", str(self.sock),
            "-c", "max_connections=300", "-c", "fsync=off", "-c", "shared_buffers=128MB",
        ]  # fmt: skip
        # pg_ctl double-forks the server; the postmaster writes its PID to postmaster.pid.
        pg_ctl = [
            postgres_bin("pg_ctl"), "start", "-D", str(self.data), "-l",
            str(self.daemon.log_file), "-o", " ".join(argv[3:]), "-w", "-t", "60",
        ]  # fmt: skip
        proc = subprocess.run(
            self._as_owner(pg_ctl), capture_output=True, text=True, stdin=subprocess.DEVNULL
        )
        if proc.returncode != 0:
            raise StackError(
                f"PostgreSQL did not start on {self.endpoint()}:\n{proc.stdout}{proc.stderr}\n"
                f"{tail(self.daemon.log_file)}"
            )
        pid = (self.data / "postmaster.pid").read_text().split()[0]
        self.daemon.pid_file.parent.mkdir(parents=True, exist_ok=True)
        self.daemon.pid_file.write_text(pid + "\n")
        if not wait_for(lambda: self.health().ok, 30):
            raise StackError(f"PostgreSQL started but does not answer: {self.health().detail}")
        self._create_databases()

    def _create_databases(self) -> None:
        with psycopg.connect(self.s.pg_dsn("postgres"), autocommit=True) as conn:
            existing = {r[0] for r in conn.execute("SELECT datname FROM pg_database")}
            for db in (self.s.pg_db, self.s.dagster_pg_db):
                if db not in existing:
                    conn.execute(f'CREATE DATABASE "{db}"')

    def stop(self) -> bool:
        # SIGINT is PostgreSQL's "fast" shutdown: roll back open transactions, exit cleanly.
        return self.daemon.stop(sig=signal.SIGINT, timeout=30)

    def health(self) -> Health:
        try:
            with psycopg.connect(self.s.pg_dsn("postgres"), connect_timeout=3) as conn:
                version = conn.execute("SHOW server_version").fetchone()
            return Health(True, f"PostgreSQL {version[0] if version else '?'}")
        except psycopg.Error as e:
            return Health(False, str(e).strip().splitlines()[0] if str(e) else type(e).__name__)
