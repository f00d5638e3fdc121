"""What a clean run computes: the mock client on the same rows (the engine's reference)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from fennel_dagster.mock import MockClient
from fennel_dagster.ops.rows import to_records


def mock_run(datasets: list[Any], events: pd.DataFrame) -> MockClient:
    mock = MockClient()
    mock.commit("reference", datasets=datasets)
    mock.log(datasets[0], events)
    return mock


def as_multiset(rows: list[dict[str, Any]], cols: list[str]) -> list[tuple[Any, ...]]:
    return sorted(tuple(r[c] for c in cols) for r in rows)


def mock_rows(mock: MockClient, dataset: str) -> list[dict[str, Any]]:
    return to_records(mock.get_dataset_df(dataset))
