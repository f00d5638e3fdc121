"""Imported by the engine's fork server as its first preload (``forking.PRELOAD``), and by
nothing else: it ties the server's life to the thread that started it. Without it the server
noticed its supervisor's death only through its "alive" pipe, in Python, after a
finalisation during which the runners lived on."""

from fennel_dagster.engine.forking import die_with_parent

die_with_parent()
