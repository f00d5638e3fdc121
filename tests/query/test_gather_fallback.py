"""A gather plan that meets a value outside its rules hands the engines' answers it already
has to the executor: the query is answered as the executor answers it, and no engine is
asked twice (two asks could also see two states). Pure logic: the engines' answers come
from a stand-in; the server tests run the real thing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from examples.payments.datasets import DATASETS
from examples.payments.featuresets import FEATURESETS
from fennel_dagster import commit_spec
from fennel_dagster.commit.compiler import compile_blueprints, jobs_of
from fennel_dagster.commit.graph import EntityGraph
from fennel_dagster.engine.lookup_client import EngineLookups, Routes, Want
from fennel_dagster.metadata.registry import of_spec
from fennel_dagster.query.gather import GatherPlan, Unfit
from fennel_dagster.serve.queries import QueryRunner
from fennel_dagster.serve.state import BranchGraph
from fennel_dagster.settings import get_settings

COMMIT = commit_spec("payments", DATASETS, FEATURESETS)
JOBS = jobs_of(compile_blueprints(EntityGraph.build(COMMIT)))
GRAPH = BranchGraph("main", 1, COMMIT, tuple(of_spec(f"h{i}", j) for i, j in enumerate(JOBS)))
VALUES = {"country": "NL", "spend_7d": 12.5}


def test_an_unfit_value_goes_to_the_executor_with_the_answers_in_hand(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[list[str]] = []

    async def engines(self: EngineLookups, wants: list[Want]) -> list[Any]:
        asked.append([w.job.spec.dataset.name for w in wants])
        return [([{**k, **{f: VALUES[f] for f in w.fields or ()}} for k in w.keys],
                 [True] * len(w.keys)) for w in wants]  # fmt: skip

    def unfit(self: GatherPlan, *args: Any) -> Any:
        raise Unfit("a value outside the rules")

    monkeypatch.setattr(EngineLookups, "lookup_many_records", engines)
    runner = QueryRunner(get_settings(), processes=1)
    try:
        outputs = ["UserFeatures.country", "UserFeatures.spend_7d"]
        plan = runner.plan(GRAPH, ["UserFeatures.uid"], outputs)
        types = {f"{fs.name}.{f.name}": f.dtype for fs in COMMIT.featuresets for f in fs.features}

        def run() -> dict[str, list[Any]]:
            return asyncio.run(runner.run_json(GRAPH, plan, {"UserFeatures.uid": [7, 8]}, None,
                                               types, Routes(), "-"))  # fmt: skip

        gathered = run()
        monkeypatch.setattr(GatherPlan, "run", unfit)
        executed = run()
    finally:
        runner.close()
    assert gathered == executed == {"UserFeatures.country": ["NL", "NL"],
                                    "UserFeatures.spend_7d": [12.5, 12.5]}  # fmt: skip
    assert len(asked) == 2 and sorted(asked[0]) == sorted(asked[1]) == ["User", "UserSpend"]
