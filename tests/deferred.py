"""Declarations checked at commit only, for tests of the commit's own rules."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from fennel_dagster.declare.semantics import deferred


def checked_at_commit(test: Callable[..., Any]) -> Callable[..., Any]:
    """``@dataset`` checks pipelines itself (as Fennel's does); inside ``test`` it leaves them
    to the commit, whose rules the test is about."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> Any:
        with deferred():
            return test(*args, **kwargs)

    return run
