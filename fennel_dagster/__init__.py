"""fennel_dagster: a realtime feature platform on Dagster."""
