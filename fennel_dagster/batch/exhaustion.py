"""A bounded source's end: ``@source(bounded=True, idleness=...)`` (Fennel's).

Fennel: a bounded source "is assumed to have exhausted after Fennel is unable to obtain any
new data despite continuously asking for at least ``idleness``". The pollers of Postgres and
S3 sources (``pg_ingest``, ``s3_ingest``) ask every ``every``; once no poll has found new
data for ``idleness`` they ask no more (they keep beating, so the runner does not take them
for stuck). The clock starts with the poller: a restarted poller asks again for ``idleness``
before it concludes again. Sources the platform reads continuously (Kafka, webhooks) cannot be
bounded: the commit refuses it (``commit.validate.unread_source_options``)."""

from __future__ import annotations

import logging

from fennel_dagster.wire import spec

log = logging.getLogger(__name__)


class Exhaustion:
    def __init__(self, source: spec.SourceSpec, now: float, what: str = "source") -> None:
        self.bounded = source.bounded
        self.idleness = source.idleness
        self.last_new = now
        self.what = what
        self._told = False

    def saw(self, new: int, now: float) -> None:
        """A poll at ``now`` found ``new`` rows or files."""
        if new:
            self.last_new = now

    def exhausted(self, now: float) -> bool:
        """Whether the source is done: bounded, and nothing new for ``idleness`` seconds."""
        if not self.bounded or self.idleness is None or now - self.last_new < self.idleness:
            return False
        if not self._told:
            self._told = True
            log.info("%s: bounded, and nothing new for %ss: exhausted, polled no more",
                     self.what, self.idleness)  # fmt: skip
        return True
