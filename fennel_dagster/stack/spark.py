"""PySpark ``local[*]``: no daemon, but its extra jars and a session that really runs.

The jars (Kafka source, S3A, Postgres JDBC) are fetched once by Maven; the session check
runs a small aggregation and is cached in a marker file because a JVM start costs seconds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fennel_dagster.batch.spark import spark_session
from fennel_dagster.settings import Settings
from fennel_dagster.stack import maven
from fennel_dagster.stack.process import StackError
from fennel_dagster.stack.service import Health


def jdbc_url(settings: Settings, db: str | None = None) -> str:
    """The Postgres JDBC URL Spark reads offline tables with (driver org.postgresql.Driver)."""
    return f"jdbc:postgresql://{settings.postgres_host}:{settings.pg_port}/{db or settings.pg_db}"


class Spark:
    name = "spark"

    def __init__(self, settings: Settings) -> None:
        self.s = settings
        self.marker = settings.run_dir / "spark.ok"

    def endpoint(self) -> str:
        return self.s.spark_master

    def jars_current(self) -> bool:
        return True  # checked by health(): stale jars make it unhealthy

    def log_path(self) -> str:
        """The log of the session check (Spark itself runs inside each user's process)."""
        return str(self.s.logs_dir / "spark.log")

    def running_pid(self) -> int | None:
        return None

    def start(self) -> None:
        if not maven.is_current(self.s, "spark"):
            maven.fetch(self.s, "spark")
            self.marker.unlink(missing_ok=True)  # new jars: verify the session again
        if not self.marker.exists():
            health = self.check_session()
            if not health.ok:
                raise StackError(f"a local Spark session did not run: {health.detail}")
            self.marker.parent.mkdir(parents=True, exist_ok=True)
            self.marker.write_text(health.detail)

    def stop(self) -> bool:
        return False

    def check_session(self) -> Health:
        """Run the session check in a child process so Spark's console noise goes to a log."""
        log = Path(self.log_path())
        log.parent.mkdir(parents=True, exist_ok=True)
        code = (
            "from fennel_dagster.stack.spark import Spark; import sys; "
            "from fennel_dagster.settings import get_settings; "
            "h = Spark(get_settings()).run_session_check(); print('RESULT', h.ok, h.detail); "
            "sys.exit(0 if h.ok else 1)"
        )
        env = {**os.environ, **self.s.as_env()}
        with open(log, "a") as out:
            proc = subprocess.run(
                [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=out, text=True, env=env
            )
        result = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        if proc.returncode == 0 and result:
            return Health(True, result[-1].split(" ", 2)[2])
        return Health(False, (result[-1] if result else proc.stdout[-500:]) + f" (see {log})")

    def run_session_check(self) -> Health:
        try:
            spark = spark_session(self.s, app="fennel-stack-health")
            rows = spark.createDataFrame([(1, 2.0), (1, 3.0), (2, 4.0)], ["k", "v"])
            got = {
                r["k"]: r["total"]
                for r in rows.groupBy("k").sum("v").withColumnRenamed("sum(v)", "total").collect()
            }
            spark.stop()
            if got != {1: 5.0, 2: 4.0}:
                return Health(False, f"aggregation returned {got}")
            return Health(True, f"session ok (Spark {spark.version})")
        except Exception as e:  # noqa: BLE001
            return Health(False, f"{type(e).__name__}: {e}")

    def health(self) -> Health:
        jars = list(self.s.spark_jars_path.glob("*.jar"))
        if not jars or not maven.is_current(self.s, "spark"):
            return Health(False, "jars missing or stale (run `fennel-dagster stack up`)")
        if not self.marker.exists():
            return Health(False, "session not verified yet")
        return Health(True, f"{len(jars)} jars; {self.marker.read_text().strip()}")
