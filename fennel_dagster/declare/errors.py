"""Errors raised while declaring entities: each names the entity, the field and the fix."""


class DeclarationError(TypeError):
    """A declaration that cannot be turned into the IR (wrong type, missing timestamp, ...)."""
