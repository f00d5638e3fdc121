"""The GraphQL schema a branch's featuresets generate, and where Dagster shows it."""

from __future__ import annotations

from examples.payments.datasets import DATASETS
from examples.payments.featuresets import FEATURESETS
from fennel_dagster import commit_spec
from fennel_dagster.commit.catalog import BranchCatalog
from fennel_dagster.serve.graphql import SchemaBuilder, featureset_sdl, root_inputs
from fennel_dagster.serve.state import BranchGraph

COMMIT = commit_spec("payments", DATASETS, FEATURESETS)


def test_each_featureset_is_a_typed_graphql_type_with_its_inputs_as_arguments() -> None:
    sdl = SchemaBuilder(BranchGraph("main", 1, COMMIT)).build().as_str()
    assert "userFeatures(uid: Int64 = null): UserFeatures" in sdl
    # TxnFeatures.user_spend_7d aliases UserFeatures.spend_7d, so it needs UserFeatures.uid
    assert "userFeatures_uid: Int64 = null" in sdl
    assert "spend7d: Float" in sdl and "isHeavySpender: Boolean" in sdl
    assert "explain(inputs: [String!]!, outputs: [String!]!): Explain!" in sdl
    assert "log(webhook: String!, endpoint: String!, rows: JSON!): LogAccepted!" in sdl
    fs = {f.name: f for f in COMMIT.featuresets}
    assert root_inputs(fs["UserFeatures"], fs) == ["UserFeatures.uid"]


def test_featureset_assets_show_their_graphql_type_and_the_endpoint() -> None:
    from assets.datasets import featureset_spec

    sdl = featureset_sdl("main", 1, COMMIT)
    cat = BranchCatalog("main", 1, COMMIT)
    spec = featureset_spec(
        cat, next(f for f in COMMIT.featuresets if f.name == "UserFeatures"), sdl
    )
    assert "type UserFeatures" in str(spec.metadata["GraphQL type"].value)
    assert str(spec.metadata["GraphQL endpoint"].value).endswith("/graphql")


def test_a_repeated_document_is_validated_once_and_the_limits_still_hold() -> None:
    from strawberry.extensions.validation_cache import _get_validate_cache

    from fennel_dagster.serve.graphql import MAX_ALIASES

    schema = SchemaBuilder(BranchGraph("main", 1, COMMIT)).build()
    doc = '{ explain(inputs: ["UserFeatures.uid"], outputs: ["UserFeatures.spend7d"]) { outputs } }'
    cache = _get_validate_cache(1024)
    schema.execute_sync(doc)
    before = cache.cache_info()
    schema.execute_sync(doc)
    after = cache.cache_info()
    assert (after.hits, after.misses) == (before.hits + 1, before.misses)

    bomb = "{ " + " ".join(f"a{i}: __typename" for i in range(MAX_ALIASES + 1)) + " }"
    result = schema.execute_sync(bomb)
    assert result.errors and "aliases" in result.errors[0].message
    deep = "{ __schema { types { fields { type { fields { type { fields { type { name } } } } } } } } }"
    result = schema.execute_sync(deep)
    assert result.errors and "depth" in result.errors[0].message
