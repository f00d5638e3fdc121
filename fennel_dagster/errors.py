"""One exception root for the platform, with one subclass per area of the data flow.

Catch ``FennelError`` for anything the platform raises on purpose; catch an area class to
handle one stage. Concrete errors live next to the code that raises them and subclass the
area they belong to here. Where an error was a builtin (``ValueError``, ``LookupError``...)
it keeps that base too, so code written against the builtin still catches it.

Messages: Fennel's words first, our fix beside them
----------------------------------------------------
Fennel's error messages are part of its interface: its own client tests, and its users',
compare ``str(e)`` with ``==``. So where Fennel raises an error for the same mistake,
``str(e)`` is Fennel's message, word for word (its mock's, where its mock and server
differ), and the fix we add goes in ``e.hint``, never into ``str(e)``. The hint is also
attached as an exception note (``add_note``), so a traceback shows it under the message.
Where Fennel has no message for an error, ``str(e)`` is ours and names the entity, the
field and the fix itself (``hint`` is then ``None``). A commit's ``CommitRejected`` follows
the same rule over its list of violations (``commit/errors.py``); the query server sends
the hint and the error's class beside the message, and the HTTP client raises the same
class with the same text and hint (``client/http.py``).
"""

from __future__ import annotations


class FennelError(Exception):
    """Anything fennel_dagster raises on purpose: the message names the entity and the fix,
    or is Fennel's own message with the fix in ``hint`` (see the module's docstring)."""

    hint: str | None = None

    def __init__(self, *args: object, hint: str | None = None) -> None:
        super().__init__(*args)
        if hint:
            self.hint = hint
            self.add_note(hint)


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
