"""Apache Kafka in KRaft mode (one combined broker + controller) from Maven Central jars.

Transactions are the engine's foundation, so the single-node overrides that make them work
(replication factor 1, min ISR 1 for the transaction and offsets logs) are set here, and the
health check is a transactional produce plus a ``read_committed`` consume.
"""

from __future__ import annotations

import base64
import subprocess
import time
import uuid

from fennel_dagster.settings import Settings
from fennel_dagster.stack import maven
from fennel_dagster.stack.prereqs import require
from fennel_dagster.stack.process import Daemon, StackError, tail, wait_for
from fennel_dagster.stack.service import Health

HEALTH_TOPIC = "__fennel_stack_health"

LOG4J2 = """\
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.stdout.ref = STDOUT
logger.kafka.name = kafka
logger.kafka.level = warn
logger.apache.name = org.apache.kafka
logger.apache.level = warn
logger.state.name = state.change.logger
logger.state.level = warn
logger.started.name = kafka.server.KafkaRaftServer
logger.started.level = info
"""


class Kafka:
    name = "kafka"

    def __init__(self, settings: Settings) -> None:
        self.s = settings
        self.root = settings.home_dir / "kafka"
        self.logs_dir = self.root / "data"
        self.config = self.root / "server.properties"
        self.daemon = Daemon(
            name=self.name,
            pid_file=settings.run_dir / "kafka.pid",
            log_file=settings.logs_dir / "kafka.log",
            marker=str(self.config),
        )

    def endpoint(self) -> str:
        return self.s.kafka_servers

    def jars_current(self) -> bool:
        return maven.is_current(self.s, "kafka")

    def log_path(self) -> str:
        return str(self.daemon.log_file)

    def running_pid(self) -> int | None:
        return self.daemon.pid()

    def _properties(self) -> str:
        host, port, cport = self.s.host, self.s.kafka_port, self.s.kafka_controller_port
        return "\n".join(
            [
                "process.roles=broker,controller",
                "node.id=1",
                f"controller.quorum.voters=1@{host}:{cport}",
                f"listeners=PLAINTEXT://{host}:{port},CONTROLLER://{host}:{cport}",
                f"advertised.listeners=PLAINTEXT://{host}:{port}",
                "controller.listener.names=CONTROLLER",
                "inter.broker.listener.name=PLAINTEXT",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                f"log.dirs={self.logs_dir}",
                "num.partitions=1",
                "auto.create.topics.enable=false",
                "delete.topic.enable=true",
                "offsets.topic.replication.factor=1",
                "offsets.topic.num.partitions=8",
                "transaction.state.log.replication.factor=1",
                "transaction.state.log.min.isr=1",
                "transaction.state.log.num.partitions=8",
                "group.initial.rebalance.delay.ms=0",
                "share.coordinator.state.topic.replication.factor=1",
                "share.coordinator.state.topic.min.isr=1",
                "log.retention.hours=-1",
                "log.segment.bytes=67108864",
                "",
            ]
        )

    def _java(self, main: str, *args: str) -> list[str]:
        return [
            require("java"), "-Xms256m", "-Xmx768m", "-XX:+UseG1GC", "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.root / 'log4j2.properties'}",
            "-cp", maven.classpath(self.s, "kafka"), main, *args,
        ]  # fmt: skip

    def _prepare(self) -> None:
        maven.fetch(self.s, "kafka")
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "log4j2.properties").write_text(LOG4J2)
        self.config.write_text(self._properties())
        if (self.logs_dir / "meta.properties").exists():
            return
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        # `=` form: one id in 64 starts with "-", which argparse would take for an option
        argv = self._java(
            "kafka.tools.StorageTool",
            "format",
            f"--cluster-id={cluster_id}",
            "-c",
            str(self.config),
        )
        proc = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            raise StackError(f"Kafka storage format failed:\n{proc.stdout}{proc.stderr}")

    def start(self) -> None:
        self._prepare()
        self.daemon.start(self._java("kafka.Kafka", str(self.config)))
        if not wait_for(lambda: self.health().ok, 90, interval=1.0):
            raise StackError(
                f"Kafka did not answer on {self.endpoint()}: {self.health().detail}\n"
                f"{tail(self.daemon.log_file)}"
            )

    def stop(self) -> bool:
        return self.daemon.stop(timeout=30)

    def health(self) -> Health:
        """A transactional write then a read_committed read of the same record."""
        from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
        from confluent_kafka.admin import AdminClient, NewTopic

        bootstrap = self.endpoint()
        try:
            # a starting broker is no news
            quiet: dict[str, str | int | float] = {"bootstrap.servers": bootstrap, "log_level": 0}
            admin = AdminClient({**quiet, "socket.timeout.ms": 3000})
            topics = admin.list_topics(timeout=3).topics
            if HEALTH_TOPIC not in topics:
                fut = admin.create_topics([NewTopic(HEALTH_TOPIC, 1, 1)])[HEALTH_TOPIC]
                try:
                    fut.result(timeout=10)
                except KafkaException as e:
                    if "TOPIC_ALREADY_EXISTS" not in str(e):
                        raise
            producer = Producer(
                {
                    **quiet,
                    "transactional.id": f"fennel-stack-health-{self.s.kafka_port}",
                    "transaction.timeout.ms": 10000,
                }
            )
            producer.init_transactions(10)
            token = uuid.uuid4().hex.encode()
            producer.begin_transaction()
            producer.produce(HEALTH_TOPIC, value=token)
            producer.commit_transaction(10)
            consumer = Consumer(
                {
                    **quiet,
                    "group.id": "fennel-stack-health",
                    "isolation.level": "read_committed",
                    "enable.auto.commit": False,
                }
            )
            try:
                tp = TopicPartition(HEALTH_TOPIC, 0)
                _, high = consumer.get_watermark_offsets(tp, timeout=5)
                consumer.assign([TopicPartition(HEALTH_TOPIC, 0, max(high - 10, 0))])
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    msg = consumer.poll(0.5)
                    if msg is not None and msg.error() is None and msg.value() == token:
                        return Health(True, "transactional round trip ok")
                return Health(False, "committed record not visible to a read_committed consumer")
            finally:
                consumer.close()
        except KafkaException as e:
            return Health(False, str(e))
