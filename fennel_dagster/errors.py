"""One exception root for the platform, with one subclass per area of the data flow.

Catch ``FennelError`` for anything the platform raises on purpose; catch an area class to
handle one stage. Concrete errors live next to the code that raises them and subclass the
area they belong to here. Where an error was a builtin (``ValueError``, ``LookupError``...)
it keeps that base too, so code written against the builtin still catches it.
"""

from __future__ import annotations


class FennelError(Exception):
    """Anything fennel_dagster raises on purpose: every message names the entity and the fix."""


class DeclarationFailed(FennelError):
    """Declaring a dataset, pipeline, featureset or extractor went wrong (``declare/``)."""


class WireFailed(FennelError):
    """Bytes or user code that cannot be (de)serialised as the IR (``wire/``)."""


class CommitError(FennelError):
    """A commit that was refused or could not be carried out (``commit/``, ``metadata/``)."""


class ExecutionError(FennelError):
    """Operators or expressions that cannot run on a batch (``ops/``)."""


class EngineError(FennelError):
    """The streaming engine: a job that cannot run, recovery that cannot finish."""


class QueryError(FennelError):
    """Lookups and feature queries: unknown features, unservable lookups, extractor failures."""


class ClientError(FennelError):
    """The client side: a request that cannot be sent or was answered with an error."""


class StackFailed(FennelError):
    """The local stack of services (``stack/``): a service that would not start or stop."""


__all__ = [
    "ClientError", "CommitError", "DeclarationFailed", "EngineError", "ExecutionError",
    "FennelError", "QueryError", "StackFailed", "WireFailed",
]  # fmt: skip
