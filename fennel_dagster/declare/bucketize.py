"""Fennel's ``bucketize``: the discrete window that ended last at a time, for pipelines that
key rows by window (``assign("window", Window, lambda df: df["ts"].apply(...))``)."""

from __future__ import annotations

import datetime as dt

import pandas as pd

from fennel_dagster.declare.dtypes import Window
from fennel_dagster.declare.errors import DeclarationError
from fennel_dagster.declare.window import Hopping, Tumbling, duration


def bucketize(
    timestamp: dt.datetime | pd.Timestamp,
    window: str | tuple[str, str] | Hopping | Tumbling,
) -> Window:
    """The last window of ``window`` (``"1h"``: tumbling, ``("1d", "1h")``: a day's window
    every hour, or a ``Tumbling``/``Hopping``) that ended at or before ``timestamp``, in
    whole seconds as Fennel counts them."""
    if isinstance(window, Hopping) and window.duration is None:
        raise DeclarationError("bucketize: a Hopping('forever', ...) window has no bucket to name")
    if isinstance(window, Tumbling | Hopping):
        assert window.duration is not None
        size, stride = window.duration, window.stride
    elif isinstance(window, tuple):
        size, stride = duration(window[0], "bucketize"), duration(window[1], "bucketize stride")
    elif isinstance(window, str):
        size = stride = duration(window, "bucketize")
    else:
        raise DeclarationError(
            f"bucketize: window {window!r} is not a duration, a (duration, stride) pair, "
            "Tumbling or Hopping"
        )
    at = pd.Timestamp(timestamp)
    at = at.tz_localize("UTC") if at.tzinfo is None else at.tz_convert("UTC")
    now = int(at.timestamp())
    # the newest window end at or before ``now``: ends are a start (a stride multiple) + size
    end = (now - size) // stride * stride + size
    begin = end - size
    utc = dt.UTC
    # ``Window`` is a ``@struct`` (a dataclass made at run time, whose fields mypy cannot see)
    return Window(  # type: ignore[call-arg]
        begin=dt.datetime.fromtimestamp(begin, tz=utc), end=dt.datetime.fromtimestamp(end, tz=utc)
    )
