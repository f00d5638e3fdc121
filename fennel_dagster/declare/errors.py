"""Errors raised while declaring entities: each names the entity, the field and the fix."""

from fennel_dagster.errors import DeclarationFailed


class DeclarationError(DeclarationFailed, TypeError):
    """A declaration that cannot be turned into the IR (wrong type, missing timestamp, ...)."""
