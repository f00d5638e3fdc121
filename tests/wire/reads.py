"""Whether a piece of code reads an attribute, judged from its syntax tree.

A reader is ``path/to/module.py`` (the whole module) or ``path/to/module.py::qualname`` (a
function, a class, or a method as ``Class.method``; nested functions are searched with their
parent). It reads ``attr`` if it holds an ``Attribute`` node ``x.attr``, a keyword argument
``attr=`` in a call or class pattern (``case Node(attr=...)``), or the string ``"attr"`` as
the name argument of ``getattr`` (how a generic walker reads a field it names).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@functools.cache
def _tree(path: str) -> ast.Module:
    return ast.parse((ROOT / path).read_text(), filename=path)


def _find(tree: ast.AST, qualname: str) -> ast.AST | None:
    node: ast.AST | None = tree
    for part in qualname.split("."):
        if node is None:
            return None
        node = next(
            (
                n
                for n in ast.iter_child_nodes(node)
                if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                and n.name == part
            ),
            None,
        )
    return node


def scope(reader: str) -> ast.AST | None:
    """The syntax tree a reader names (None: no such module or function)."""
    path, _, qualname = reader.partition("::")
    if not (ROOT / path).is_file():
        return None
    tree = _tree(path)
    return _find(tree, qualname) if qualname else tree


def reads(node: ast.AST, attr: str) -> bool:
    for n in ast.walk(node):
        if isinstance(n, ast.Attribute) and n.attr == attr:
            return True
        if isinstance(n, ast.keyword) and n.arg == attr:
            return True
        if isinstance(n, ast.MatchClass) and attr in n.kwd_attrs:
            return True
        if (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Name)
            and n.func.id == "getattr"
            and len(n.args) >= 2
            and isinstance(n.args[1], ast.Constant)
            and n.args[1].value == attr
        ):
            return True
    return False


def reader_reads(reader: str, attr: str) -> bool:
    node = scope(reader)
    return node is not None and reads(node, attr)
