"""Types and windows as in ``fennel.dtypes``."""

from fennel_dagster.declare.dtypes import (
    Decimal,
    Embedding,
    Window,
    between,
    oneof,
    regex,
    struct,
)
from fennel_dagster.declare.window import Continuous, Hopping, Session, Tumbling

__all__ = ["Continuous", "Decimal", "Embedding", "Hopping", "Session", "Tumbling", "Window",
           "between", "oneof", "regex", "struct"]  # fmt: skip
