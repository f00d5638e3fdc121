"""The declaration language: datasets, pipelines, featuresets, extractors, sources.

Names and semantics follow Fennel's public Python client so a feature repository moves
here by changing its import lines. Every declaration converts to the IR in ``wire.spec``.
"""

from fennel_dagster.declare.commit import commit_spec
from fennel_dagster.declare.dataset import (
    Dataset,
    Field,
    dataset,
    dataset_spec,
    field,
    inputs,
    pipeline,
)
from fennel_dagster.declare.errors import DeclarationError
from fennel_dagster.declare.featureset import (
    Feature,
    Featureset,
    extractor,
    feature,
    featureset,
    featureset_spec,
    outputs,
)
from fennel_dagster.declare.meta import meta

__all__ = [
    "Dataset", "DeclarationError", "Feature", "Featureset", "Field", "commit_spec", "dataset",
    "dataset_spec", "extractor", "feature", "featureset", "featureset_spec", "field", "inputs",
    "meta", "outputs", "pipeline",
]  # fmt: skip
