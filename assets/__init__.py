"""Dagster assets of fennel_dagster: committed feature definitions as software-defined assets."""
