"""As in ``fennel.lib``: meta, inputs/outputs, includes and expectations."""

from fennel_dagster.declare.bucketize import bucketize
from fennel_dagster.declare.dataset import inputs
from fennel_dagster.declare.expectations import (
    expect_column_mean_to_be_between,
    expect_column_values_to_be_between,
    expect_column_values_to_be_in_set,
    expect_column_values_to_be_unique,
    expect_column_values_to_match_regex,
    expect_column_values_to_not_be_null,
    expectations,
)
from fennel_dagster.declare.featureset import outputs
from fennel_dagster.declare.meta import meta
from fennel_dagster.wire.usercode import includes

__all__ = [
    "bucketize", "expect_column_mean_to_be_between", "expect_column_values_to_be_between",
    "expect_column_values_to_be_in_set", "expect_column_values_to_be_unique",
    "expect_column_values_to_match_regex", "expect_column_values_to_not_be_null",
    "expectations", "includes", "inputs", "meta", "outputs",
]  # fmt: skip
