"""``Secret``: a reference to a value in AWS Secrets Manager (Fennel's
``fennel.integrations.aws.Secret``).

A ``Secret`` names where a credential lives (the secret's ARN, the role to read it with and
the path of keys inside its JSON), never the credential itself. Connections take one wherever
they take a credential; like every credential it is kept out of the IR.
"""

from __future__ import annotations

from fennel_dagster.declare.errors import DeclarationError


class Secret:
    """``Secret(arn=..., role_arn=...)``; ``secret["kafka"]["username"]`` is the value at that
    path inside the secret's JSON. Indexing returns a new reference and leaves this one as is."""

    def __init__(
        self, arn: str, role_arn: str | None = None, path: list[str] | None = None
    ) -> None:
        if not isinstance(arn, str) or not arn:
            raise DeclarationError(
                f"Secret(arn={arn!r}): give the secret's ARN, e.g. "
                "'arn:aws:secretsmanager:<region>:<account>:secret:<name>'"
            )
        self.arn, self.role_arn, self.path = arn, role_arn, tuple(path or ())

    def __getitem__(self, key: str) -> Secret:
        if not isinstance(key, str):
            raise DeclarationError(
                f"Secret({self.arn!r}){self._where()}[{key!r}]: keys inside a secret are str"
            )
        return Secret(self.arn, self.role_arn, [*self.path, key])

    def _where(self) -> str:
        return "".join(f"[{k!r}]" for k in self.path)

    def __repr__(self) -> str:
        return f"Secret({self.arn!r}){self._where()}"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and (self.arn, self.role_arn, self.path) == (
            other.arn,
            other.role_arn,
            other.path,
        )

    def __hash__(self) -> int:
        return hash((self.arn, self.role_arn, self.path))


__all__ = ["Secret"]
