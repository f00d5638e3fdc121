"""Dagster sensors of fennel_dagster: commit requests and engine keep-alive."""
