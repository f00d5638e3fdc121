"""Featuresets: features, auto-extractors for lookups/aliases/expressions, python extractors."""

from __future__ import annotations

import pytest

from examples.payments import DATASETS, FEATURESETS
from examples.payments.featuresets import TxnFeatures, UserFeatures
from fennel_dagster import (
    DeclarationError,
    commit_spec,
    extractor,
    feature,
    featureset,
    inputs,
    outputs,
)
from fennel_dagster.declare import featureset_spec
from fennel_dagster.wire import spec


def test_lookup_alias_and_expression_features_get_auto_extractors() -> None:
    fs = featureset_spec(UserFeatures)
    by_name = {e.name: e for e in fs.extractors}
    spend = by_name["_auto_spend_7d"]
    assert (spend.kind, spend.inputs, spend.lookup_dataset, spend.lookup_field, spend.default) == (
        "lookup", ("UserFeatures.uid",), "UserSpend", "spend_7d", 0.0,
    )  # fmt: skip
    heavy = by_name["_auto_is_heavy_spender"]
    assert heavy.kind == "expr" and heavy.inputs == ("UserFeatures.spend_7d",)
    alias = {e.name: e for e in featureset_spec(TxnFeatures).extractors}["_auto_user_spend_7d"]
    assert alias.kind == "alias" and alias.inputs == ("UserFeatures.spend_7d",)


def test_python_extractor_ships_its_source_deps_and_io() -> None:
    risk = {e.name: e for e in featureset_spec(TxnFeatures).extractors}["risk"]
    assert risk.kind == "python" and risk.deps == ("MerchantVolume", "UserSpend")
    assert risk.inputs == ("TxnFeatures.uid", "TxnFeatures.merchant_id", "TxnFeatures.amount")
    assert risk.code is not None and risk.code.source.startswith("def risk(cls, ts")
    assert "@extractor" not in risk.code.source


def test_extractor_outputting_a_foreign_feature_is_rejected() -> None:
    with pytest.raises(DeclarationError, match=r"outputs Other\.x, which is not a feature of Mine"):

        @featureset
        class Mine:
            a: int

            @extractor
            @inputs("a")
            @outputs("Other.x")
            def f(cls, ts, a):
                return a


def test_lookup_feature_needs_features_named_like_the_dataset_keys() -> None:
    from examples.payments.datasets import UserSpend

    with pytest.raises(DeclarationError) as e:

        @featureset
        class NoKey:
            user: int
            spend: float = feature(UserSpend.spend_7d, default=0.0)

    assert str(e.value) == (
        "feature NoKey.spend looks up UserSpend.spend_7d, keyed by uid, but NoKey has no feature "
        "named uid: add `uid: <type>` to NoKey"
    )


def test_example_repo_converts_to_a_commit_sorted_by_name() -> None:
    c = commit_spec("v1", DATASETS, FEATURESETS)
    assert [d.name for d in c.datasets] == sorted(d.name for d in c.datasets)
    assert {f.name for f in c.featuresets} == {"UserFeatures", "TxnFeatures"}
    assert all(d.meta.owner for d in c.datasets)
    assert isinstance(c, spec.CommitSpec)
