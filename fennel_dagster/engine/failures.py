"""How a runner can fail, by what the runner does about it.

- ``Fenced``: a newer runner owns the partition: stop, touch nothing.
- ``RecoveryError``: something is not there yet (a topic, replaylog markers): retry.
  ``TopicGone``: one of its topics is not there at all (deleted with its job, as a rule):
  said at once instead of waiting for it; retried, so a job still registered waits it out.
- ``StopRequested``: the runner was told to stop while it was starting (recovering): it
  ends cleanly, as after a stop in its loop.
- ``PermanentJobError``: retrying would fail the same way: stop and record why.
- ``ServiceUnavailable``: a service the job's logic calls (a schema registry) did not
  answer: the batch is retried whole, never judged message by message.
Anything else (Kafka, Postgres, S3 errors) is transient and retried with backoff.
"""

from __future__ import annotations

from fennel_dagster.errors import EngineError


class Fenced(EngineError, RuntimeError):
    """A newer runner took over this partition: stop without touching state."""


class RecoveryError(EngineError, RuntimeError):
    """Recovery could not finish yet (a missing topic, a slow replaylog): retried."""


class PermanentJobError(EngineError):
    """A job partition that cannot run as committed (its spec cannot be built, or its logic
    raised on a batch: ``process`` is deterministic, so a retry would raise again). The
    runner stops and records the reason in the registry instead of retrying forever."""


class ServiceUnavailable(EngineError, ConnectionError):
    """A service the job's logic needs did not answer. Not the input's fault: the batch is
    not bisected into poison messages (``engine.isolation``); the runner waits the outage
    out with backoff, as for Kafka or Postgres (``engine.restarts.transient``)."""


class TopicGone(RecoveryError):
    """A topic the runner reads (an input, its replaylog) does not exist: its job was
    deleted (its runner stops once it hears so) or the topic was removed by hand."""


class StopRequested(EngineError):
    """The runner's stop flag was set during a long wait (recovery): it ends at once."""
