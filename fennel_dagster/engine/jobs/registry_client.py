"""A schema registry's schemas by id, for the Avro and Protobuf decoders of a source job."""

from __future__ import annotations

import threading

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from fennel_dagster.engine.failures import ServiceUnavailable
from fennel_dagster.engine.jobs.registry_formats import BadValue


class Registry:
    """Schemas by id, each fetched once; a client made on first use (a job is built before
    it reads, and building it must not need the registry)."""

    def __init__(self, url: str, auth: str | None) -> None:
        self.url, self.auth = url, auth
        self._client: SchemaRegistryClient | None = None
        self._lock = threading.Lock()

    def schema(self, schema_id: int) -> Schema:
        with self._lock:
            if self._client is None:
                conf = {"url": self.url}
                if self.auth:
                    conf["basic.auth.user.info"] = self.auth
                self._client = SchemaRegistryClient(conf)
            client = self._client
        try:
            return client.get_schema(schema_id)
        except SchemaRegistryError as e:
            if e.http_status_code in (404, 422):
                raise BadValue(
                    f"schema id {schema_id} is not in the registry at {self.url}: the value was "
                    "written with another registry, or its schema was deleted; produce it with "
                    "a serializer of this registry"
                ) from e
            raise ServiceUnavailable(
                f"the schema registry at {self.url} answered {e.http_status_code} for schema "
                f"{schema_id}: {e.error_message}"
            ) from e
        except Exception as e:  # noqa: BLE001 - its HTTP client's errors: the registry's fault
            raise ServiceUnavailable(
                f"the schema registry at {self.url} did not answer ({type(e).__name__}: {e})"
            ) from e
