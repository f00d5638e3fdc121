"""An HTTP sink's connector, read once into a typed endpoint: the commit's health check and
the delivery job agree on its URL, batch size, headers and TLS trust because both read it
here (the connector's config is the IR's plain key/value pairs)."""

from __future__ import annotations

import json
import ssl
from dataclasses import dataclass

from fennel_dagster.wire.spec import ConnectorSpec

DEFAULT_LIMIT = 100  # changes per request when the sink gives no limit (Fennel's default)


def join_url(host: str, path: str) -> str:
    """``host`` and ``path`` with exactly one "/" between them."""
    return f"{host.rstrip('/')}/{path.lstrip('/')}" if path else host


@dataclass(frozen=True)
class HttpEndpoint:
    connection: str  # the HTTP(name=...) it belongs to
    host: str
    endpoint: str
    healthz: str
    limit: int
    headers: tuple[tuple[str, str], ...]
    ca_cert_pem: str | None

    @classmethod
    def of(cls, connector: ConnectorSpec) -> HttpEndpoint:
        cfg = dict(connector.config)
        headers = json.loads(str(cfg["headers"])) if cfg.get("headers") else {}
        return cls(
            connection=connector.name,
            host=str(cfg.get("host") or ""),
            endpoint=str(cfg.get("endpoint") or ""),
            healthz=str(cfg.get("healthz") or ""),
            limit=int(cfg.get("limit") or DEFAULT_LIMIT),
            headers=tuple(sorted((str(k), str(v)) for k, v in headers.items())),
            ca_cert_pem=str(cfg["ca_cert_pem"]) if cfg.get("ca_cert_pem") else None,
        )

    @property
    def url(self) -> str:
        return join_url(self.host, self.endpoint)

    @property
    def healthz_url(self) -> str:
        return join_url(self.host, self.healthz or "/")

    def verify(self) -> ssl.SSLContext | bool:
        """TLS trust: the sink's own CA certificate when it gives one, else the system's."""
        if self.ca_cert_pem is None:
            return True
        return ssl.create_default_context(cadata=self.ca_cert_pem)

    def describe(self) -> str:
        return f"sink http({self.connection}) at {self.url}"
