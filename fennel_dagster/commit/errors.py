"""Validation errors of a commit: every one names the entity, the field or operator, and the fix."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fennel_dagster.errors import CommitError


@dataclass(frozen=True)
class Violation:
    """One broken rule of a commit (not an exception: ``CommitRejected`` carries them all)."""

    entity: str  # "UserSpend", "UserSpend.agg", "UserFeatures.account_age"
    where: str  # the field or operator concerned ("" when the entity as a whole)
    message: str  # what is wrong
    fix: str  # what to do about it

    def __str__(self) -> str:
        at = f" ({self.where})" if self.where else ""
        return f"{self.entity}{at}: {self.message}: {self.fix}"


class CommitRejected(CommitError, ValueError):
    """A commit that fails validation; ``str()`` lists every error, not just the first."""

    def __init__(self, errors: Sequence[Violation]) -> None:
        self.errors = list(errors)
        lines = "\n".join(f"  - {e}" for e in self.errors)
        super().__init__(f"commit rejected with {len(self.errors)} error(s):\n{lines}")


class BackfillRefused(CommitError, ValueError):
    """``commit(backfill=False)`` and the commit would back-fill a pipeline."""


def raise_for_backfill(new_pipelines: list[str]) -> None:
    """The refusal ``backfill=False`` gives (the client's and the mock's)."""
    new = sorted(set(new_pipelines))
    if new:
        raise BackfillRefused(
            f"commit(backfill=False) would back-fill {', '.join(new)}: no committed version "
            "of these pipelines is isomorphic to the new one (a new dataset or a version "
            "bump). Commit with backfill=True (the default), or leave them unchanged"
        )
