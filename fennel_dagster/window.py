"""Windows: ``from fennel_dagster.window import Continuous, Tumbling, Hopping, Session``."""

from fennel_dagster.declare.window import Continuous, Hopping, Session, Tumbling

__all__ = ["Continuous", "Hopping", "Session", "Tumbling"]
