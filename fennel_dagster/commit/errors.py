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
    text: str = ""  # Fennel's words for this error, where Fennel has them (``str(CommitRejected)``)

    def __str__(self) -> str:
        at = f" ({self.where})" if self.where else ""
        return f"{self.entity}{at}: {self.message}: {self.fix}"


class CommitRejected(CommitError, ValueError):
    """A commit that fails validation; ``errors`` holds every violation, not just the first.

    ``str()`` is Fennel's message of the first violation Fennel has words for (Fennel stops
    at its first error), with every violation and its fix in ``hint``; when no violation
    has Fennel's words, ``str()`` lists them all with their fixes (``hint`` is None)."""

    def __init__(self, errors: Sequence[Violation]) -> None:
        self.errors = list(errors)
        lines = "\n".join(f"  - {e}" for e in self.errors)
        listing = f"commit rejected with {len(self.errors)} error(s):\n{lines}"
        fennel = next((e.text for e in self.errors if e.text), None)
        if fennel is None:
            super().__init__(listing)
        else:
            super().__init__(fennel, hint=listing)

    def __reduce__(self) -> tuple[type[CommitRejected], tuple[list[Violation]]]:
        return (type(self), (self.errors,))


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


# ---------------------------------------------------------------- branches
# The mock and the platform raise these with the same words (Fennel's mock's).

MAIN_BRANCH = "main"


class BranchExistsError(CommitError, ValueError):
    """``init_branch``/``clone_branch`` to a name a branch already has."""


class BranchNotFoundError(CommitError, LookupError):
    """A branch named by a request (clone's source, delete, checkout) does not exist."""


class BranchNotSynced(BranchNotFoundError, KeyError):
    """A request on a checked-out branch that does not exist (never created, or deleted):
    Fennel's mock raises a ``KeyError``, so ``str()`` is quoted as a ``KeyError``'s is."""


class MainBranchDeletion(CommitError, ValueError):
    """``delete_branch('main')``: the main branch cannot be deleted."""


def branch_exists(name: str, cloning: bool = False) -> BranchExistsError:
    """Fennel's words: its init and its clone say it differently."""
    text = f"Branch `{name}` already exists" if cloning else f"Branch name: `{name}` already exists"
    return BranchExistsError(text, hint="pick another name, or delete_branch it first")


def clone_source_missing(name: str, known: Sequence[str]) -> BranchNotFoundError:
    return BranchNotFoundError(
        f"Branch `{name}` does not exist",
        hint=f"clone one of the existing branches ({', '.join(known) or 'none'})",
    )


def deleted_branch_missing(name: str, known: Sequence[str]) -> BranchNotFoundError:
    return BranchNotFoundError(
        f"Branch name: {name} does not exist",
        hint=f"the branches are: {', '.join(known) or 'none'}",
    )


def branch_not_synced(name: str, known: Sequence[str]) -> BranchNotSynced:
    return BranchNotSynced(
        f"Branch: `{name}` not found, please sync this branch and try again. "
        f"Available branches: {list(known)}",
        hint=f"init_branch({name!r}) or checkout({name!r}, init=True) creates it",
    )


def main_branch_deletion() -> MainBranchDeletion:
    return MainBranchDeletion(
        "Cannot delete the main branch.", hint="delete the other branches; main stays"
    )
