"""User functions shipped as canonical source text, and loaded back in a fresh process.

``capture`` turns a function or lambda into a ``spec.UserCode``:
- ``source`` is the function re-printed by ``ast.unparse`` without its decorators (so
  formatting and comments never change the bytes), or the lambda expression alone, found in
  its file by matching compiled bytecode (so several lambdas on one line are told apart);
- ``preamble`` holds the defining module's top-level import statements and the sources of
  helpers named with ``@includes``.

``load`` executes the preamble and the source in a new namespace that the executor seeds with
runtime handles for the entities the code names (datasets for ``lookup``, featuresets), so the
user's repository need not be importable where the code runs. Imports that fail there (the
user's own modules) are skipped: names they would bind must come from the seeded namespace.
"""

from __future__ import annotations

import ast
import dataclasses
import dis
import inspect
import linecache
import sys
import textwrap
import types
from collections.abc import Callable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from fennel_dagster.errors import WireFailed
from fennel_dagster.wire.spec import UserCode

SHIPPED_MODULE = "fennel_usercode"  # the module name shipped code runs under
# a module of that name exists: a shipped @struct (a dataclass) looks its module up
sys.modules.setdefault(SHIPPED_MODULE, types.ModuleType(SHIPPED_MODULE))


class UserCodeError(WireFailed, ValueError):
    """User code that cannot be captured (no source) or loaded (syntax, missing name)."""


def includes(*helpers: Callable[..., Any]) -> Callable[[Any], Any]:
    """``@includes(helper)``: ship ``helper``'s source along with the decorated function."""

    def mark(fn: Any) -> Any:
        target = getattr(fn, "__func__", fn)
        target.__fennel_includes__ = tuple(helpers)
        return fn

    return mark


# helpers a pipeline's ``@includes`` names, shipped with every function it captures (its
# lambdas call them too, as Fennel ships a pipeline's includes with each of its operators)
_SHARED: ContextVar[tuple[Callable[..., Any], ...]] = ContextVar("fennel_includes", default=())


@contextmanager
def shared_includes(fn: Any) -> Iterator[None]:
    """While ``fn`` (a pipeline) builds its operators, its ``@includes`` helpers go with each."""
    helpers = getattr(getattr(fn, "__func__", fn), "__fennel_includes__", ())
    token = _SHARED.set((*_SHARED.get(), *helpers))
    try:
        yield
    finally:
        _SHARED.reset(token)


def capture(fn: Callable[..., Any]) -> UserCode:
    fn = getattr(fn, "__func__", fn)
    if not callable(fn) or not hasattr(fn, "__code__"):
        raise UserCodeError(f"{fn!r} is not a Python function")
    if fn.__name__ == "<lambda>":
        return UserCode(source=_lambda_source(fn), entrypoint="", preamble=_preamble(fn))
    try:
        text = _dedent(inspect.getsource(fn))
    except (OSError, TypeError) as e:
        raise UserCodeError(
            f"cannot read the source of {fn.__qualname__}: define it in a .py file "
            "(functions typed into a REPL have no source to ship)"
        ) from e
    tree = ast.parse(text)
    node = tree.body[0]
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        raise UserCodeError(f"{fn.__qualname__}: expected a def, found {type(node).__name__}")
    node.decorator_list = []
    return UserCode(source=ast.unparse(node), entrypoint=node.name, preamble=_preamble(fn))


def _dedent(text: str) -> str:
    """A nested def's source moved to column 0: its first line's indentation removed from
    every line that has it. Unlike ``textwrap.dedent``, a comment at a shallower column (a
    line the tokenizer ignores) does not stop the rest from moving."""
    lines = text.splitlines(keepends=True)
    first = lines[0] if lines else ""
    indent = first[: len(first) - len(first.lstrip())]
    return "".join(line[len(indent) :] if line.startswith(indent) else line for line in lines)


def _lambda_source(fn: Any) -> str:
    filename = fn.__code__.co_filename
    lines = linecache.getlines(filename)
    if not lines:
        raise UserCodeError(f"cannot read the source of a lambda defined in {filename}")
    tree = ast.parse("".join(lines))
    line = fn.__code__.co_firstlineno
    candidates = [n for n in ast.walk(tree) if isinstance(n, ast.Lambda) and n.lineno == line]
    args = fn.__code__.co_varnames[: fn.__code__.co_argcount]
    same_args = [n for n in candidates if tuple(a.arg for a in n.args.args) == args]
    if len(same_args) > 1:  # several lambdas on one line: tell them apart by what they compute
        consts = {c for c in fn.__code__.co_consts if not hasattr(c, "co_code")}
        same_args = [n for n in same_args if _lambda_consts(n) == consts]
    if len(same_args) != 1:
        raise UserCodeError(
            f"cannot tell which lambda of {filename}:{line} this is: put each lambda on its own "
            "line, or use a def"
        )
    return ast.unparse(same_args[0])


def _lambda_consts(node: ast.Lambda) -> set[object]:
    code = compile(ast.Expression(node), "<lambda>", "eval")
    inner = next(c for c in code.co_consts if hasattr(c, "co_code"))
    return {c for c in inner.co_consts if not hasattr(c, "co_code")}


def _referenced_names(code: Any) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            names |= _referenced_names(const)
    return names


def _literal(name: str, value: object, owner: str) -> str:
    text = repr(value)
    try:
        same = ast.literal_eval(text) == value
    except (ValueError, SyntaxError):
        same = False
    if not same:
        raise UserCodeError(
            f"{owner} uses {name!r}, a {type(value).__name__} that cannot be shipped as source: "
            "make it a module-level import, a literal constant, or an @includes helper"
        )
    return f"{name} = {text}"


def _importable(value: Any) -> tuple[str, str] | None:
    """(module, name) that imports ``value`` back, for module-level classes and functions."""
    module, qual = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qual, str) or "." in qual:
        return None
    if (
        module in ("__main__", "builtins")
        or getattr(sys.modules.get(module), qual, None) is not value
    ):
        return None
    return module, qual


def _is_struct(value: Any) -> bool:
    return isinstance(value, type) and bool(getattr(value, "__fennel_struct__", False))


def _struct_binding(name: str, value: type, seen: set[int]) -> list[str]:
    """A ``@struct`` class the code builds values of (``Role(...)``): imported where its module
    is importable (the same class, so values compare equal), else defined from its source;
    the structs its fields name come first."""
    if id(value) in seen:
        return []
    seen.add(id(value))
    lines: list[str] = []
    for field in dataclasses.fields(value):
        for dep in _types_in(field.type, vars(sys.modules.get(value.__module__, sys)), value):
            lines += _struct_binding(dep.__name__, dep, seen)
    try:
        source = _dedent(inspect.getsource(value))
    except (OSError, TypeError) as e:
        raise UserCodeError(f"cannot read the source of the struct {value.__qualname__}") from e
    rename = "" if value.__name__ == name else f"\n{name} = {value.__name__}"
    found = _importable(value)
    if found is None:
        return [*lines, source + rename]
    module, qual = found
    fallback = textwrap.indent(source, "    ")
    alias = "" if qual == name else f" as {name}"
    return [*lines, f"try:\n    from {module} import {qual}{alias}\nexcept ImportError:\n"
                    f"{fallback}{textwrap.indent(rename.strip(), '    ')}"]  # fmt: skip


def _types_in(annotation: Any, scope: Mapping[str, Any], owner: type) -> list[type]:
    """The ``@struct`` classes an annotation names (in lists, Optionals, maps, as text)."""
    if isinstance(annotation, str):
        annotation = scope.get(annotation, getattr(owner, "__annotations__", {}).get(annotation))
    if _is_struct(annotation):
        return [annotation]
    return [t for arg in getattr(annotation, "__args__", ()) for t in _types_in(arg, scope, owner)]


def _attributes_read(code: Any, name: str) -> set[str]:
    """The attributes ``code`` (nested code too) reads on the variable ``name``
    (``cls.helper(df)`` reads ``helper`` on ``cls``)."""
    out: set[str] = set()
    ins = list(dis.get_instructions(code))
    for a, b in zip(ins, ins[1:], strict=False):
        if (
            a.opname in ("LOAD_DEREF", "LOAD_FAST", "LOAD_GLOBAL", "LOAD_NAME")
            and a.argval == name
            and b.opname in ("LOAD_ATTR", "LOAD_METHOD")
        ):
            out.add(str(b.argval))
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            out |= _attributes_read(const, name)
    return out


def methods_holder(entity: str) -> str:
    """The name of the class a dataset's shipped methods are defined in, in a preamble."""
    return f"__fennel_methods_{entity}"


def _dataset_methods(entity: str, cls: type, attrs: AbstractSet[str], seen: set[int]) -> list[str]:
    """The dataset's own methods a pipeline's code calls (``cls.doc_helper(df, "Notion")``),
    shipped in a class of their own that ``load`` hands to ``cls`` (``FieldNames``)."""
    bodies: list[str] = []
    lines: list[str] = []
    wanted = sorted(attrs)
    while wanted:
        attr = wanted.pop(0)
        raw = cls.__dict__.get(attr)
        fn = raw.__func__ if isinstance(raw, classmethod | staticmethod) else raw
        if not inspect.isfunction(fn) or id(fn) in seen:
            continue
        seen.add(id(fn))
        try:
            source = _dedent(inspect.getsource(fn))
        except (OSError, TypeError) as e:
            raise UserCodeError(f"cannot read the source of {entity}.{attr}") from e
        lines.extend(_captured_values(fn, seen))
        bodies.append(textwrap.indent(source, "    "))
        if isinstance(raw, classmethod) and fn.__code__.co_varnames:  # what it calls on cls
            wanted += sorted(_attributes_read(fn.__code__, fn.__code__.co_varnames[0]))
    if not bodies:
        return []
    return [*lines, f"class {methods_holder(entity)}:\n" + "\n".join(bodies)]


def _closure_binding(
    name: str,
    value: Any,
    owner: str,
    seen: set[int],
    attrs: AbstractSet[str] = frozenset(),
) -> list[str]:
    """How a value the function reads from an enclosing function is rebuilt where it runs:
    declarations (and imports) local to a test function are as shippable as module-level ones.
    ``attrs``: what the function reads on it (a dataset's methods among them ship too)."""
    if _is_struct(value):
        return _struct_binding(name, value, seen)
    if inspect.ismodule(value):
        alias = "" if name == value.__name__ else f" as {name}"
        return [f"import {value.__name__}{alias}"]
    entity = getattr(value, "__fennel_dataset_name__", None) or getattr(
        value, "__fennel_featureset_name__", None
    )
    if isinstance(entity, str):
        # a dataset or featureset: the executor seeds a handle under its name
        methods = _dataset_methods(entity, value, attrs, seen) if isinstance(value, type) else []
        return [*methods, *([] if entity == name else [f"{name} = {entity}"])]
    found = _importable(value)
    if found is not None:
        module, qual = found
        return [f"from {module} import {qual}" + ("" if qual == name else f" as {name}")]
    if inspect.isfunction(value) and value.__name__ != "<lambda>" and id(value) not in seen:
        seen.add(id(value))  # a helper defined in the enclosing function: ship its source
        helper = capture(value)
        lines = [*_captured_values(value, seen), helper.source]
        return lines if value.__name__ == name else [*lines, f"{name} = {value.__name__}"]
    if inspect.isfunction(value) and id(value) not in seen:  # a lambda passed in: its expression
        seen.add(id(value))
        return [*_captured_values(value, seen), f"{name} = {capture(value).source}"]
    return [_literal(name, value, owner)]


def _captured_values(fn: Any, seen: set[int] | None = None) -> list[str]:
    """Closure variables and module constants the function reads, as assignments."""
    owner = fn.__qualname__
    seen = seen if seen is not None else {id(fn)}
    lines = []
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=True):
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell: a name the enclosing function binds later
            continue
        lines.extend(
            _closure_binding(name, value, owner, seen, _attributes_read(fn.__code__, name))
        )
    module_globals = fn.__globals__
    for name in sorted(_referenced_names(fn.__code__)):
        value = module_globals.get(name, _ABSENT)
        if _is_struct(value):  # a class of the user's module, which may not import there
            lines.extend(_struct_binding(name, value, seen))
            continue
        if value is _ABSENT or callable(value) or inspect.ismodule(value):
            continue
        if (
            isinstance(
                value, bool | int | float | str | bytes | tuple | list | dict | set | frozenset
            )
            or value is None
        ):
            lines.append(_literal(name, value, owner))
    return lines


_ABSENT = object()


def _preamble(fn: Any) -> str:
    parts: list[str] = []
    module = sys.modules.get(fn.__module__)
    if module is not None:
        try:
            tree = ast.parse(inspect.getsource(module))
        except (OSError, TypeError):
            tree = ast.Module(body=[], type_ignores=[])
        for stmt in tree.body:
            if isinstance(stmt, ast.Import | ast.ImportFrom) and not (
                isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__"
            ):
                parts.append(ast.unparse(stmt))
    helpers = dict.fromkeys((*getattr(fn, "__fennel_includes__", ()), *_SHARED.get()))
    token = _SHARED.set(())  # a helper's own capture ships only its own includes
    try:
        seen: set[int] = set()
        for helper in helpers:
            if _is_struct(helper):  # ``@includes(MyStruct)``: the class, as code builds it
                parts.extend(_struct_binding(helper.__name__, helper, seen))
                continue
            parts.extend(_captured_values(helper))
            parts.append(capture(helper).source)
    finally:
        _SHARED.reset(token)
    parts.extend(_captured_values(fn))
    return "\n".join(dict.fromkeys(parts))


def load(code: UserCode, namespace: Mapping[str, Any] | None = None) -> Callable[..., Any]:
    """The callable that ``code`` defines, with ``namespace`` names visible to it."""
    seeded = dict(namespace or {})
    # seeded first too: a closure binding in the preamble (``spend = Spend``) names a handle
    env: dict[str, Any] = {"__name__": SHIPPED_MODULE, **seeded}
    for stmt in _statements(code.preamble):
        try:
            exec(compile(stmt, "<fennel preamble>", "exec"), env)  # noqa: S102
        except ImportError:
            continue  # the user's own modules: their names come from ``namespace``
        except NameError:
            bound = _entity_binding(stmt)
            if bound is None:
                raise
            env[bound[0]] = FieldNames(bound[1], env.get(methods_holder(bound[1])))
    env.update(seeded)
    try:
        if not code.entrypoint:
            return eval(compile(code.source, "<fennel lambda>", "eval"), env)  # type: ignore[no-any-return]  # noqa: S307
        exec(compile(code.source, f"<fennel {code.entrypoint}>", "exec"), env)  # noqa: S102
    except SyntaxError as e:
        raise UserCodeError(f"shipped code does not compile: {e}") from e
    fn = env.get(code.entrypoint)
    if not callable(fn):
        raise UserCodeError(f"shipped code defines no function {code.entrypoint!r}")
    return fn  # type: ignore[no-any-return]


class FieldNames:
    """A dataset a shipped function names where no handle of it is seeded (a pipeline's own
    ``cls`` in a helper it defines): its fields by name, as ``str(cls.movie)`` reads them."""

    def __init__(self, dataset: str, methods: type | None = None) -> None:
        self.__fennel_dataset_name__ = dataset
        self.__fennel_methods__ = methods  # the dataset's own methods the code calls

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        raw = vars(self.__fennel_methods__ or object).get(attr)
        if isinstance(raw, classmethod):
            return types.MethodType(raw.__func__, self)  # ``cls`` inside is this handle
        if isinstance(raw, staticmethod):
            return raw.__func__
        return raw if inspect.isfunction(raw) else attr


def _entity_binding(stmt: str) -> tuple[str, str] | None:
    """(name, entity) of a closure's ``cls = MovieStats`` (``_closure_binding``), else None."""
    node = ast.parse(stmt).body[0]
    if (
        isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
        and isinstance(node.value, ast.Name)
    ):
        return node.targets[0].id, node.value.id
    return None


def _statements(preamble: str) -> list[str]:
    if not preamble.strip():
        return []
    return [ast.unparse(s) for s in ast.parse(preamble).body]
