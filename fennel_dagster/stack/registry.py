"""A schema registry on loopback: Apicurio Registry (Maven Central), serving Confluent's
schema-registry REST API at ``/apis/ccompat/v7``.

Avro and Protobuf sources name a registry by URL, and confluent-kafka's clients talk to it
as to Confluent's own (which is not published on Maven Central). Schemas are kept in an H2
database file under the stack's home, so ids written into topics outlive a restart.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from fennel_dagster.settings import Settings
from fennel_dagster.stack import maven
from fennel_dagster.stack.prereqs import require
from fennel_dagster.stack.process import Daemon, StackError, tail, wait_for
from fennel_dagster.stack.service import Health


class SchemaRegistry:
    name = "registry"

    def __init__(self, settings: Settings) -> None:
        self.s = settings
        self.root = settings.home_dir / "registry"
        self.daemon = Daemon(
            name=self.name,
            pid_file=settings.run_dir / "registry.pid",
            log_file=settings.logs_dir / "registry.log",
            marker=str(self.root),
        )

    def endpoint(self) -> str:
        return self.s.registry_url

    def jars_current(self) -> bool:
        return maven.archive_current(self.s, "registry")

    def log_path(self) -> str:
        return str(self.daemon.log_file)

    def running_pid(self) -> int | None:
        return self.daemon.pid()

    def start(self) -> None:
        app = maven.fetch_archive(self.s, "registry")
        runners = sorted(app.glob("*-runner.jar"))
        if not runners:
            raise StackError(f"no *-runner.jar in {app}: remove it and retry `stack up`")
        self.root.mkdir(parents=True, exist_ok=True)
        argv = [
            # C1 only and the serial collector: a third faster start, little work after it
            require("java"), "-Xms64m", "-Xmx384m", "-XX:TieredStopAtLevel=1",
            "-XX:+UseSerialGC", "-Djava.awt.headless=true",
            f"-Dquarkus.http.port={self.s.registry_port}", f"-Dquarkus.http.host={self.s.host}",
            f"-Dquarkus.datasource.jdbc.url=jdbc:h2:file:{self.root / 'schemas'}",
            "-Dregistry.auth.enabled=false", "-Dquarkus.log.level=WARN",
            "-Dquarkus.http.access-log.enabled=false",
            "-jar", str(runners[0]),
        ]  # fmt: skip
        self.daemon.start(argv, cwd=app)
        if not wait_for(lambda: self.health().ok, 90, interval=0.5):
            raise StackError(
                f"the schema registry did not answer on {self.endpoint()}: "
                f"{self.health().detail}\n{tail(self.daemon.log_file)}"
            )

    def stop(self) -> bool:
        return self.daemon.stop(timeout=20)

    def health(self) -> Health:
        """Lists the subjects and reads the schema types the registry knows."""
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback
        try:
            with direct.open(f"{self.endpoint()}/subjects", timeout=5) as r:
                subjects = json.loads(r.read())
            with direct.open(f"{self.endpoint()}/schemas/types", timeout=5) as r:
                types = json.loads(r.read())
        except (OSError, ValueError, urllib.error.URLError) as e:
            return Health(False, f"{type(e).__name__}: {e}")
        if not {"AVRO", "PROTOBUF"} <= set(types):
            return Health(False, f"schema types {types}: AVRO and PROTOBUF expected")
        return Health(True, f"{len(subjects)} subjects; types {', '.join(sorted(types))}")
