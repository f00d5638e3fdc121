"""fennel_dagster: a realtime feature platform — Fennel's data plane on Dagster.

from fennel_dagster import dataset, field, pipeline, inputs, featureset, feature, extractor
"""

from fennel_dagster import semantics as _semantics  # noqa: F401 - installs declare.semantics

# Fennel code also writes ``from fennel import connectors`` then ``connectors.Webhook(...)``
from fennel_dagster import sources as connectors
from fennel_dagster.api import FennelClient, Response
from fennel_dagster.commit.errors import CommitRejected, Violation
from fennel_dagster.declare import (
    Dataset,
    DeclarationError,
    Featureset,
    commit_spec,
    dataset,
    extractor,
    feature,
    featureset,
    field,
    inputs,
    meta,
    outputs,
    pipeline,
)
from fennel_dagster.declare.expectations import expectations
from fennel_dagster.declare.sources import source
from fennel_dagster.errors import (
    ClientError,
    CommitError,
    DeclarationFailed,
    EngineError,
    ExecutionError,
    FennelError,
    QueryError,
    StackFailed,
    WireFailed,
)
from fennel_dagster.wire.usercode import includes

__all__ = [
    "ClientError", "CommitError", "CommitRejected", "Dataset", "DeclarationError",
    "DeclarationFailed", "EngineError", "ExecutionError", "Featureset", "FennelClient", "FennelError",
    "QueryError", "Response", "StackFailed", "Violation", "WireFailed", "commit_spec", "connectors", "dataset",
    "expectations", "extractor", "feature", "featureset", "field", "includes", "inputs", "meta",
    "outputs", "pipeline", "source",
]  # fmt: skip
