"""Who honours each field of the IR (``wire.spec``): the promise that no declared parameter is
silently ignored, as data that ``tests/wire/test_conformance.py`` checks.

Every field of every dataclass of ``wire.spec`` has one entry in ``TABLE``
(``fennel_dagster.wire.conformance_table``), keyed ``"Class.field"``:

- ``Consumed``: the mock, the engine and Spark each read it. ``readers`` name modules or
  functions (``path.py`` or ``path.py::Qualified.name``) that read the attribute; which
  executor a reader stands for follows from its path (``executors_of``: ``ops/`` and the
  shared commit rules count for the mock and the engine alike, ``batch/`` is Spark).
  ``via`` names, for an executor with no reader of its own, its function that hands rows to
  another's reader (Spark runs stateful operators through ``ops.pipeline``); ``moot`` says
  why a field has no meaning for an executor (the mock polls no source). ``proof`` is the
  test that shows the behaviour.
- ``Refused``: a commit with a non-default value is refused by ``rule`` (a validation
  function), naming the entity, the parameter and the fix; ``value`` is a non-default value
  the test commits. ``platform_only`` says why the mock accepts it (it runs no such thing).
- ``Structural``: identity and bookkeeping (names, ids, input edges, containers) that every
  executor necessarily uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeAlias

Executor = Literal["mock", "engine", "spark"]
EXECUTORS: tuple[Executor, ...] = ("mock", "engine", "spark")


@dataclass(frozen=True)
class Consumed:
    readers: tuple[str, ...]
    proof: str
    via: tuple[tuple[Executor, str], ...] = ()
    moot: tuple[tuple[Executor, str], ...] = ()


@dataclass(frozen=True)
class Refused:
    rule: str
    value: object
    platform_only: str | None = None


@dataclass(frozen=True)
class Structural:
    reason: str


Entry: TypeAlias = Consumed | Refused | Structural

# the commit rules and helpers that both the mock client and the definition server run
_SHARED_COMMIT = (
    "fennel_dagster/commit/validate.py",
    "fennel_dagster/commit/wellformed.py",
    "fennel_dagster/commit/environment.py",
    "fennel_dagster/commit/graph.py",
    "fennel_dagster/commit/catalog.py",
    "fennel_dagster/commit/infer.py",
    "fennel_dagster/commit/infer_nodes.py",
    "fennel_dagster/commit/infer_types.py",
)


def executors_of(reader: str) -> tuple[Executor, ...]:
    """Which executors a reader's code runs for, from its path."""
    path = reader.partition("::")[0]
    if path.startswith("fennel_dagster/wire/"):
        return EXECUTORS  # user code is loaded the same way by all three
    if path.startswith(("fennel_dagster/ops/", "fennel_dagster/query/")) or path in _SHARED_COMMIT:
        return ("mock", "engine")
    if path.startswith("fennel_dagster/mock/"):
        return ("mock",)
    if path.startswith("fennel_dagster/batch/"):
        return ("spark",)
    return ("engine",)  # engine/, serve/, offline/, quality/, the platform's commit modules


def covered(entry: Consumed) -> dict[Executor, str]:
    """For each executor, what honours the field there (a reader, a hand-over or a reason)."""
    out: dict[Executor, str] = {}
    for r in entry.readers:
        for e in executors_of(r):
            out.setdefault(e, r)
    for e, how in (*entry.via, *entry.moot):
        out.setdefault(e, how)
    return out
