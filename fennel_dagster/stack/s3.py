"""An S3-compatible server on loopback: S3Proxy (Maven Central) on a filesystem backend.

Everything else talks to it through boto3 only, so a real S3 endpoint can replace it by
setting ``FENNEL_S3_ENDPOINT``.
"""

from __future__ import annotations

import os
import uuid

from fennel_dagster.s3 import s3_client
from fennel_dagster.settings import Settings
from fennel_dagster.stack import maven
from fennel_dagster.stack.prereqs import require
from fennel_dagster.stack.process import Daemon, StackError, tail, wait_for
from fennel_dagster.stack.service import Health

LOGBACK = """<configuration>
  <appender name="STDOUT" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%d{HH:mm:ss.SSS} %-5level %logger{20} - %msg%n</pattern></encoder>
  </appender>
  <root level="warn"><appender-ref ref="STDOUT"/></root>
</configuration>
"""


class S3Server:
    name = "s3"

    def __init__(self, settings: Settings) -> None:
        self.s = settings
        self.root = settings.home_dir / "s3"
        self.config = settings.home_dir / "s3proxy.properties"
        self.daemon = Daemon(
            name=self.name,
            pid_file=settings.run_dir / "s3.pid",
            log_file=settings.logs_dir / "s3.log",
            marker=str(self.config),
        )

    def endpoint(self) -> str:
        return f"http://{self.s.host}:{self.s.s3_port}"

    def jars_current(self) -> bool:
        return maven.is_current(self.s, "s3proxy")

    def log_path(self) -> str:
        return str(self.daemon.log_file)

    def running_pid(self) -> int | None:
        return self.daemon.pid()

    def _properties(self) -> str:
        return "\n".join(
            [
                f"s3proxy.endpoint={self.endpoint()}",
                "s3proxy.authorization=aws-v2-or-v4",
                f"s3proxy.identity={self.s.s3_access_key}",
                f"s3proxy.credential={self.s.s3_secret_key}",
                "jclouds.provider=filesystem-nio2",
                "jclouds.identity=local",
                "jclouds.credential=local",
                f"jclouds.filesystem.basedir={self.root}",
                "",
            ]
        )

    def start(self) -> None:
        maven.fetch(self.s, "s3proxy")
        self.root.mkdir(parents=True, exist_ok=True)
        self.config.write_text(self._properties())
        (self.root.parent / "s3proxy-logback.xml").write_text(LOGBACK)
        argv = [
            require("java"), "-Xms64m", "-Xmx256m", "-Djava.awt.headless=true",
            f"-Dlogback.configurationFile={self.root.parent / 's3proxy-logback.xml'}",
            "-cp", maven.classpath(self.s, "s3proxy"),
            "org.gaul.s3proxy.Main", "--properties", str(self.config),
        ]  # fmt: skip
        self.daemon.start(argv, env={**os.environ, "LOG_LEVEL": "warn"})
        if not wait_for(self._ensure_bucket, 45, interval=0.5):
            raise StackError(
                f"the S3 server did not answer on {self.endpoint()}: {self.health().detail}\n"
                f"{tail(self.daemon.log_file)}"
            )

    def _ensure_bucket(self) -> bool:
        client = s3_client(self._direct())
        names = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
        if self.s.s3_bucket not in names:
            client.create_bucket(Bucket=self.s.s3_bucket)
        return self.health().ok

    def _direct(self) -> Settings:
        return self.s.model_copy(update={"s3_endpoint": self.endpoint(), "s3_embedded": False})

    def stop(self) -> bool:
        return self.daemon.stop(timeout=15)

    def health(self) -> Health:
        try:
            client = s3_client(self._direct())
            key = f"__health/{uuid.uuid4().hex}"
            client.put_object(Bucket=self.s.s3_bucket, Key=key, Body=b"ok")
            body = client.get_object(Bucket=self.s.s3_bucket, Key=key)["Body"].read()
            client.delete_object(Bucket=self.s.s3_bucket, Key=key)
            if body != b"ok":
                return Health(False, "object read back differs from what was written")
            return Health(True, f"put/get ok, bucket {self.s.s3_bucket}")
        except Exception as e:  # noqa: BLE001 - botocore raises many unrelated types
            return Health(False, f"{type(e).__name__}: {e}")
