"""Query planning and the non-python extractor kinds, on IR built by hand (no services)."""

from __future__ import annotations

import pandas as pd
import pytest

from fennel_dagster.query.execute import QueryExecutor
from fennel_dagster.query.plan import QueryPlanError, plan_query
from fennel_dagster.wire import spec

INT = spec.IntType()


def _user() -> spec.FeaturesetSpec:
    features = tuple(spec.FeatureSpec(n, INT) for n in ("uid", "age", "age2", "age_plus"))
    return spec.FeaturesetSpec(
        "User",
        features,
        (
            spec.ExtractorSpec("double", "User", "expr", ("User.age",), ("age2",),
                               expr=spec.Call("mul", (spec.Col("age"), spec.Lit(2)), INT)),
            spec.ExtractorSpec("plus", "User", "expr", ("User.age2",), ("age_plus",),
                               expr=spec.Call("add", (spec.Col("age2"), spec.Lit(1)), INT)),
        ),
    )  # fmt: skip


def _no_lookups(*_: object) -> tuple[pd.DataFrame, pd.Series]:
    raise AssertionError("this plan must not look anything up")


def test_plan_orders_extractors_so_each_runs_after_the_features_it_reads() -> None:
    plan = plan_query([_user()], ["User.age"], ["User.age_plus"])
    assert [ex.name for ex in plan.steps] == ["double", "plus"]


def test_plan_skips_extractors_whose_outputs_are_already_inputs() -> None:
    plan = plan_query([_user()], ["User.age2"], ["User.age_plus"])
    assert [ex.name for ex in plan.steps] == ["plus"]


def test_unreachable_feature_is_named_with_the_fix() -> None:
    with pytest.raises(QueryPlanError, match=r"User\.age is neither an input.*@outputs\('age'\)"):
        plan_query([_user()], ["User.uid"], ["User.age_plus"])


def test_unknown_feature_is_rejected_by_name() -> None:
    with pytest.raises(QueryPlanError, match=r"unknown feature User\.height"):
        plan_query([_user()], ["User.age"], ["User.height"])


def test_extractor_cycle_is_reported_with_its_path() -> None:
    fs = spec.FeaturesetSpec(
        "C",
        (spec.FeatureSpec("a", INT), spec.FeatureSpec("b", INT)),
        (
            spec.ExtractorSpec("ab", "C", "alias", ("C.a",), ("b",)),
            spec.ExtractorSpec("ba", "C", "alias", ("C.b",), ("a",)),
        ),
    )
    with pytest.raises(QueryPlanError, match=r"cycle through C\.b -> C\.a -> C\.b"):
        plan_query([fs], [], ["C.b"])


def test_featureset_name_as_output_means_all_its_features() -> None:
    plan = plan_query([_user()], ["User.uid", "User.age"], ["User"])
    assert plan.outputs == ("User.uid", "User.age", "User.age2", "User.age_plus")


def test_expr_extractors_compute_chained_features_with_qualified_column_names() -> None:
    fs = _user()
    plan = plan_query([fs], ["User.age"], ["User.age2", "User.age_plus"])
    inputs = pd.DataFrame({"User.age": [10, None]}).astype("Int64")
    out = QueryExecutor([fs], {}, _no_lookups).run(
        plan, inputs, pd.Series([pd.Timestamp.now()] * 2)
    )
    assert list(out.columns) == ["User.age2", "User.age_plus"]
    assert out["User.age2"].tolist()[0] == 20
    assert out["User.age_plus"].tolist()[0] == 21
    assert pd.isna(out["User.age_plus"].tolist()[1])
