"""Restart loops: a runner that fails the same way again and again is stopped and reported.

Transient faults (a broker or Postgres or S3 that cannot be reached, a topic not created
yet) are waited out however long they last. Any other failure that repeats identically
``limit`` times in a row, each attempt dying within ``quick_s``, would repeat forever: the
watch turns it into a ``PermanentJobError``, so the partition stops with the reason in the
registry (and in Dagster) instead of restarting into it every few seconds.
"""

from __future__ import annotations

import time

import psycopg
from botocore.exceptions import ConnectionError as BotoConnectionError
from botocore.exceptions import EndpointConnectionError
from confluent_kafka import KafkaError, KafkaException

from fennel_dagster.engine.failures import PermanentJobError, RecoveryError

_UNREACHABLE = {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT,
                KafkaError._MSG_TIMED_OUT, KafkaError._RESOLVE}  # fmt: skip


def transient(e: BaseException) -> bool:
    """A fault of the surroundings, worth waiting out."""
    if isinstance(e, KafkaException):
        err = e.args[0] if e.args else None
        return isinstance(err, KafkaError) and (err.retriable() or err.code() in _UNREACHABLE)
    return isinstance(e, RecoveryError | psycopg.OperationalError | EndpointConnectionError
                      | BotoConnectionError | ConnectionError | TimeoutError)  # fmt: skip


class RestartWatch:
    def __init__(self, what: str, limit: int = 5, quick_s: float = 60.0) -> None:
        self.what = what
        self.limit = limit
        self.quick_s = quick_s
        self._last: str | None = None
        self._repeats = 0
        self._started = time.monotonic()

    def started(self) -> None:
        self._started = time.monotonic()

    def failed(self, e: BaseException) -> None:
        """Count ``e``; raise ``PermanentJobError`` when it is a restart loop."""
        if transient(e) or time.monotonic() - self._started > self.quick_s:
            self._last, self._repeats = None, 0
            return
        sig = f"{type(e).__name__}: {e}"
        self._repeats = self._repeats + 1 if sig == self._last else 1
        self._last = sig
        if self._repeats >= self.limit:
            raise PermanentJobError(
                f"{self.what} restarted {self._repeats} times into the same failure, each "
                f"within {self.quick_s:.0f}s of starting: {sig}"
            ) from e
