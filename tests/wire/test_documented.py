"""Every parameter of Fennel's API reference is accounted for (``wire.documented``): carried by
IR fields of the conformance table, refused at declaration naming it, or taken by the client
methods said; and docs/compat.md holds the matrix generated from these tables."""

from __future__ import annotations

import ast
import importlib.util
import sys
from collections.abc import Callable
from typing import Any

import pytest

from fennel_dagster.declare.errors import DeclarationError
from fennel_dagster.wire.conformance_table import TABLE
from fennel_dagster.wire.documented import DOCUMENTED, Carried, Declined, Handled
from tests.wire.reads import ROOT, reads, scope

# a clone of github.com/fennel-ai/client (a bare one will do), to compare the table with its pages


def _tool() -> Any:
    spec = importlib.util.spec_from_file_location(
        "conformance_matrix", ROOT / "tools" / "conformance_matrix.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["conformance_matrix"] = module
    spec.loader.exec_module(module)
    return module


PARAMS = [(page, name) for page, params in DOCUMENTED.items() for name in params]


def test_every_carried_parameter_names_fields_of_the_conformance_table() -> None:
    for page, name in PARAMS:
        m = DOCUMENTED[page][name]
        if isinstance(m, Carried):
            assert m.fields, (page, name)
            unknown = [f for f in m.fields if f not in TABLE]
            assert not unknown, f"{page} {name}: {unknown} are not IR fields"


def _mentions(node: ast.AST, name: str) -> bool:
    """``name`` as a parameter, a variable, an attribute or keyword, or a string constant."""
    if reads(node, name):
        return True
    low = name.lower()
    for n in ast.walk(node):
        if isinstance(n, ast.arg) and n.arg == name:
            return True
        if isinstance(n, ast.Name) and n.id == name:
            return True
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and low in n.value.lower():
            return True
    return False


HANDLED = [(p, n) for p, n in PARAMS if isinstance(DOCUMENTED[p][n], Handled)]


@pytest.mark.parametrize(("page", "name"), HANDLED)
def test_each_client_or_server_parameter_is_taken_where_the_table_says(
    page: str, name: str
) -> None:
    m = DOCUMENTED[page][name]
    assert isinstance(m, Handled)
    assert m.at or m.missing, f"{page} {name}: neither taken anywhere nor said missing"
    for at in m.at:
        node = scope(at)
        assert node is not None, f"{page} {name}: {at} does not exist"
        assert _mentions(node, name), f"{page} {name}: {at} does not take or read {name!r}"


# a declaration that gives each parameter refused at declaration
DECLINE: dict[tuple[str, str], Callable[[], object]] = {}


def _distinct_ordered() -> object:
    from fennel_dagster.aggregate import Distinct
    from fennel_dagster.window import Continuous

    return Distinct(of="x", window=Continuous("forever"), unordered=False, into_field="xs")


DECLINE[("aggregations/distinct.md", "unordered")] = _distinct_ordered

DECLINED = [(p, n) for p, n in PARAMS if isinstance(DOCUMENTED[p][n], Declined)]


def test_every_refusal_at_declaration_has_a_declaration() -> None:
    assert sorted(DECLINE) == sorted(DECLINED)


@pytest.mark.parametrize(("page", "name"), DECLINED)
def test_a_parameter_refused_at_declaration_raises_naming_it(page: str, name: str) -> None:
    m = DOCUMENTED[page][name]
    assert isinstance(m, Declined) and scope(m.at) is not None, m
    with pytest.raises(DeclarationError) as e:
        DECLINE[(page, name)]()
    assert name in str(e.value)


def test_the_pages_check_names_every_difference() -> None:
    tool = _tool()
    same = {page: list(params) for page, params in DOCUMENTED.items()}
    assert tool.check_pages(same) == 0
    page = sorted(same)[0]
    changed = {**same, page: [*same[page], "new_param"], "operators/new.md": ["x"]}
    assert tool.check_pages(changed) == 1


def test_the_committed_matrix_is_the_generated_one() -> None:
    tool = _tool()
    assert tool.committed() == tool.render(), "run: python tools/conformance_matrix.py --write"
