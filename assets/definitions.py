"""The Dagster code location of fennel_dagster (loaded by workspace.yaml)."""

from __future__ import annotations

from dagster import Definitions


def build_definitions() -> Definitions:
    """Everything the Dagster deployment shows: grows with committed feature definitions."""
    return Definitions()


defs = build_definitions()
