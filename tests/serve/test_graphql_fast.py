"""Compiled GraphQL documents (``serve.graphql_fast``) answer exactly as strawberry's executor:
for generated documents over the example repo's featuresets (aliases, repeated fields,
literal and variable arguments, nullable and non-null variables, missing, null and
wrongly-typed values, answers of every type and of the wrong type), whenever the compiled
path answers, its ``data`` serializes to the same bytes as the executor's and the executor
reported no error; otherwise it declines and the executor answers. Pure logic: the plan's
values come from a table, not from engines (the server tests run the real thing)."""

from __future__ import annotations

import asyncio
import datetime as dt
from types import SimpleNamespace
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strawberry.schema.exceptions import CannotGetOperationTypeError

from examples.payments.datasets import DATASETS
from examples.payments.featuresets import FEATURESETS
from fennel_dagster import commit_spec
from fennel_dagster.metadata.tokens import TokenRow
from fennel_dagster.ops.rows import base_type
from fennel_dagster.query.plan import plan_query
from fennel_dagster.serve.auth import Principal
from fennel_dagster.serve.graphql import BranchSchema, Context, Schemas
from fennel_dagster.serve.graphql_fast import CompiledDocuments
from fennel_dagster.serve.state import BranchGraph

GRAPH = BranchGraph("main", 1, commit_spec("payments", DATASETS, FEATURESETS))
SERVED: BranchSchema = Schemas().of(GRAPH)
TOKEN = TokenRow("t", "test", "-", ("query",), ("*",), ("*",), dt.datetime.now(dt.UTC), None)
KINDS = {"IntType": "Int64", "FloatType": "Float", "BoolType": "Boolean", "StringType": "String"}


class _Runner:
    """Plans for real; answers each output from ``answers``, counting the calls."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers, self.calls, self.inputs = answers, 0, []

    def plan(self, graph: BranchGraph, inputs: list[str], outputs: list[str]) -> Any:
        return plan_query(list(graph.featuresets.values()), inputs, outputs)

    async def run_json(self, graph: Any, plan: Any, data: Any, *rest: Any) -> dict[str, list[Any]]:
        self.calls += 1
        self.inputs.append(repr(data))  # 1 and 1.0 apart
        return {o: [self.answers.get(o)] for o in plan.outputs}


def _context(answers: dict[str, Any]) -> Context:
    server = SimpleNamespace(
        runner=_Runner(answers),
        state=SimpleNamespace(routes=None, service_secret="-"),
        feature_types=lambda graph: {},
    )
    return Context(server, Principal(TOKEN), "main", GRAPH)  # type: ignore[arg-type]


def _kind(root: Any, feature: str) -> str | None:
    return KINDS.get(type(base_type(root.types[feature])).__name__)


def _answer_of(kind: str | None) -> st.SearchStrategy[Any]:
    typed = {
        "Int64": st.integers(-(2**70), 2**70),
        "Float": st.floats() | st.integers(-(2**60), 2**60),
        "Boolean": st.booleans(),
        "String": st.text(max_size=8),
    }.get(kind or "", st.none())
    wrong = st.text(max_size=3) | st.floats() | st.booleans() | st.integers() | st.none()
    return st.one_of(typed, typed, st.none(), wrong)  # the plan's answers: any request


def _value_of(kind: str | None, clean: bool) -> st.SearchStrategy[Any]:
    typed = {
        "Int64": st.integers(-(2**63) + 1, 2**63 - 1),
        "Float": st.floats(allow_nan=False, allow_infinity=False, width=32)
        | st.integers(-1000, 1000),
        "Boolean": st.booleans(),
        "String": st.text(alphabet="abcXYZ09 ", max_size=6),
    }.get(kind or "", st.none())
    wrong = st.text(max_size=3) | st.floats() | st.booleans() | st.integers(2**62, 2**64)
    return typed if clean else st.one_of(typed, typed, st.none(), wrong)


def _literal(kind: str | None, v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return orjson.dumps(v).decode()
    if kind == "Float" and isinstance(v, float):
        return repr(v) if "e" not in repr(v) and "n" not in repr(v) else "1.5"
    return str(v)


@st.composite
def requests(draw: st.DrawFn) -> tuple[str, dict[str, Any] | None, str | None, dict[str, Any]]:
    """A document, its variables and operation name, and the plan's answers."""
    clean = draw(st.integers(0, 9)) < 7  # well-formed: the compiled path's traffic
    name = draw(st.sampled_from(sorted(SERVED.roots)))
    root = SERVED.roots[name]
    fields = sorted(root.fields)
    extra = ["__typename"] if draw(st.integers(0, 9)) == 0 else []
    picks = draw(st.lists(st.sampled_from([*fields, *extra]), min_size=1, max_size=6))
    selections = []
    for i, f in enumerate(picks):
        alias = draw(st.sampled_from([None, f"a{i}", "same"])) if f != "__typename" else None
        selections.append(f"{alias}: {f}" if alias and alias != "same" else f)
    defs, args, variables = [], [], {}
    for arg, feature in root.args.items():
        kind = _kind(root, feature)
        how = draw(st.sampled_from(["variable"] * 5 + ["literal"] * 2 + ["omit"] * (not clean)))
        if how == "omit":
            continue
        value = draw(_value_of(kind, clean))
        if how == "literal":
            if not isinstance(value, (int, float, str, bool)) and value is not None:
                continue
            args.append(f"{arg}: {_literal(kind, value)}")
            continue
        bang = draw(st.sampled_from(["", "!"]))
        defs.append(f"${arg}: {kind}{bang}")
        args.append(f"{arg}: ${arg}")
        given_how = draw(st.sampled_from(["value"] * 2 + ["missing"] * (not clean)))
        if given_how == "value":
            variables[arg] = value
    op = draw(st.sampled_from([None, "Q"]))
    head = f"query {op or ''}({', '.join(defs)})" if defs else f"query {op or ''}"
    field_alias = draw(st.sampled_from(["", "x: "]))
    call = f"{name}({', '.join(args)})" if args else name
    doc = f"{head} {{ {field_alias}{call} {{ {' '.join(selections)} }} }}"
    answers = {f"{root.featureset}.{n}": draw(_answer_of(_kind(root, f"{root.featureset}.{n}")))
               for n in root.fields.values()}  # fmt: skip
    send_op = draw(st.sampled_from([None, op, op, op, "Other"]))
    return doc, (variables if variables or draw(st.booleans()) else None), send_op, answers


async def _both(doc: str, variables: Any, op: str | None, answers: dict[str, Any]) -> Any:
    compiled = CompiledDocuments().of("main", 1, SERVED, doc, op)
    fast_ctx, full_ctx = _context(answers), _context(answers)
    fast = await compiled.run(fast_ctx, variables) if compiled is not None else None
    try:
        full = await SERVED.schema.execute(doc, variable_values=variables,
                                           context_value=full_ctx, operation_name=op)  # fmt: skip
    except CannotGetOperationTypeError:  # no such operation: the server answers 400
        assert fast is None
        return compiled, fast, None, fast_ctx
    if fast is not None:  # the same inputs reached the plan, the same featuresets counted
        runners = fast_ctx.server.runner, full_ctx.server.runner
        assert runners[0].inputs == runners[1].inputs  # type: ignore[attr-defined]
        assert fast_ctx.touched == full_ctx.touched
    return compiled, fast, full, fast_ctx


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests())
def test_compiled_documents_answer_as_the_executor_does(request: Any) -> None:
    doc, variables, op, answers = request
    compiled, fast, full, ctx = asyncio.run(_both(doc, variables, op, answers))
    if fast is not None:
        assert not full.errors, (doc, variables, full.errors)
        assert repr(fast) == repr(full.data), (doc, variables, answers)  # 1 and 1.0 apart


def test_the_serving_shape_compiles_and_asks_once() -> None:
    doc = "query Q($uid: Int64!) { userFeatures(uid: $uid) { spend7d c: country txns1h } }"
    answers = {"UserFeatures.spend_7d": 12.5, "UserFeatures.country": "NL",
               "UserFeatures.txns_1h": 3}  # fmt: skip
    compiled, fast, full, ctx = asyncio.run(_both(doc, {"uid": 7}, None, answers))
    assert compiled is not None
    assert fast == {"userFeatures": {"spend7d": 12.5, "c": "NL", "txns1h": 3}} == full.data
    assert ctx.server.runner.calls == 1  # type: ignore[attr-defined]


def test_what_the_executor_must_answer_is_left_to_it() -> None:
    answers = {"UserFeatures.spend_7d": "12.5", "UserFeatures.country": "NL"}
    ok = "query($uid: Int64!) { userFeatures(uid: $uid) { country } }"
    cases = [
        ("query($uid: Int64!, $m: Int64!, $a: Float!, $u: Int64!) { txnFeatures(uid: $uid, "
         "merchantId: $m, amount: $a, userFeatures_uid: $u) { merchantTxns1d } }",
         {"uid": 1, "m": 2, "a": 3.0}, "a non-null variable missing, though its input is unused"),
        (ok, {"uid": "7"}, "a variable of the wrong type"),
        (ok, {"uid": 2**63}, "an Int64 out of range"),
        ("query($uid: Int64!) { userFeatures(uid: $uid) { spend7d } }", {"uid": 7},
         "an answer of the wrong type"),
        ("query($uid: Int64!) { userFeatures(uid: $uid) { __typename } }", {"uid": 7},
         "__typename"),
        ("query($uid: Int64!) { userFeatures(uid: $uid) { nope } }", {"uid": 7}, "unknown field"),
        ("query($uid: Int64!) { userFeatures(uid: $uid) { ...F } } "
         "fragment F on UserFeatures { country }", {"uid": 7}, "a fragment"),
        ("query($uid: Int64 = 3) { userFeatures(uid: $uid) { country } }", {}, "a default"),
        ("mutation { log(webhook: \"w\", endpoint: \"e\", rows: []) { accepted } }", {}, "a mutation"),
    ]  # fmt: skip
    for doc, variables, why in cases:
        _, fast, _, _ = asyncio.run(_both(doc, variables, None, answers))
        assert fast is None, why
