"""The local stack of real services: PostgreSQL, Kafka (KRaft), an S3 server, Spark."""

from fennel_dagster.stack.manager import (
    SERVICES,
    ServiceStatus,
    down,
    log_path,
    running,
    status,
    up,
)
from fennel_dagster.stack.process import StackError

__all__ = ["SERVICES", "ServiceStatus", "StackError", "down", "log_path", "running", "status", "up"]
