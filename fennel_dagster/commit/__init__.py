"""Commit: entity graph, validation, blueprints, asset bank and the two-ledger protocol."""
