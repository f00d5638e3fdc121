"""One exception root: every exception fennel_dagster defines is a ``FennelError``."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import fennel_dagster
from fennel_dagster import FennelError


def _modules() -> list[str]:
    return [
        m.name
        for m in pkgutil.walk_packages(fennel_dagster.__path__, "fennel_dagster.")
        if ".cli" not in m.name
    ]


def test_every_exception_of_the_library_has_the_one_root() -> None:
    strays = []
    for name in _modules():
        module = importlib.import_module(name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if obj.__module__ != name or not issubclass(obj, BaseException):
                continue
            if not issubclass(obj, FennelError) and obj.__name__ not in _CONTROL_FLOW:
                strays.append(f"{name}.{obj.__name__}")
    assert strays == [], f"exceptions outside FennelError: {strays}"


# internal signals that never leave the module that raises them
_CONTROL_FLOW = {"Stop", "CrashPointHit"}


def test_the_root_and_its_areas_are_exported() -> None:
    for area in ("DeclarationFailed", "CommitError", "ExecutionError", "EngineError",
                 "QueryError", "ClientError", "WireFailed", "StackFailed", "CommitRejected"):  # fmt: skip
        assert issubclass(getattr(fennel_dagster, area), FennelError)
