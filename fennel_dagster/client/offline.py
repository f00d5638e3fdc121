"""Following an offline query to its end, the same for the in-process and the HTTP client."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from fennel_dagster.errors import ClientError


class OfflineQueryFailed(ClientError):
    """An offline query that failed or was cancelled: its error, as the run recorded it."""


def wait_until_finished(
    track: Callable[[], dict[str, Any]], timeout: float, poll: float = 0.5
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        st = track()
        if st["state"] == "done":
            return st
        if st["state"] in ("failed", "cancelled"):
            error = (st.get("result") or {}).get("error", st["state"])
            raise OfflineQueryFailed(f"offline query {st['request_id']} {st['state']}: {error}")
        if time.monotonic() > deadline:
            raise OfflineQueryFailed(
                f"offline query {st['request_id']} still {st['state']} after {timeout:.0f}s "
                "(it goes on; follow it with track_offline_query, or cancel_offline_query)"
            )
        time.sleep(poll)
