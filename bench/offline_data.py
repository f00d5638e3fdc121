"""Data of the offline point-in-time benchmark, in the shape of Feast issue #3003.

Both contenders (our ``query_offline`` and Feast's Spark offline store) read the same files,
so this module needs only numpy, pandas and pyarrow: it is imported from the project's venv
and from the separate Feast venv alike. Layout under ``root``::

    history/fv{i}.parquet   user_id int64, event_timestamp timestamp[us, UTC], fv{i}_f{j} float64
    spine_{rows}.parquet    user_id int64, event_timestamp timestamp[us, UTC]

Timestamps are uniform over the 30 days ending 2026-01-01, for history and spine alike, so
some spine rows precede every event of their user (their features are null). Each
(user_id, event_timestamp) is unique within a file: at a tie the point-in-time answer would
depend on the engine's tie-breaking (Feast returns every tied row), not on the join itself.

``python -m bench.offline_data --root DIR --spine 17000`` writes the files; existing files
with the right shape are kept, so a second run (or a larger spine) costs only what is new.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

END = datetime(2026, 1, 1, tzinfo=UTC)
SPAN = timedelta(days=30)
_END_US = int(END.timestamp() * 1_000_000)
_SPAN_US = int(SPAN.total_seconds() * 1_000_000)
_TS = pa.timestamp("us", tz="UTC")


def history_schema(view: int, features: int) -> pa.Schema:
    """Schema of ``history/fv{view}.parquet``."""
    fields = [pa.field("user_id", pa.int64()), pa.field("event_timestamp", _TS)]
    fields += [pa.field(f"fv{view}_f{j}", pa.float64()) for j in range(features)]
    return pa.schema(fields)


SPINE_SCHEMA = pa.schema([pa.field("user_id", pa.int64()), pa.field("event_timestamp", _TS)])


def _keys(rng: np.random.Generator, rows: int, entities: int) -> tuple[np.ndarray, np.ndarray]:
    """user ids and timestamps (epoch µs), uniform, with (user, ts) made unique by +1 µs."""
    users = rng.integers(0, entities, size=rows, dtype=np.int64)
    ts = rng.integers(_END_US - _SPAN_US, _END_US, size=rows, dtype=np.int64)
    while True:
        order = np.lexsort((ts, users))
        u, t = users[order], ts[order]
        dup = (u[1:] == u[:-1]) & (t[1:] == t[:-1])
        if not dup.any():
            return users, ts
        ts[order[1:][dup]] += 1


def _timestamps(us: np.ndarray) -> pa.Array:
    return pa.array(us, type=pa.int64()).cast(_TS)


def _is_current(path: Path, rows: int, schema: pa.Schema) -> bool:
    """True when ``path`` already holds ``rows`` rows of ``schema`` (then it is not rewritten)."""
    if not path.exists():
        return False
    try:
        meta = pq.read_metadata(path)
        return meta.num_rows == rows and meta.schema.to_arrow_schema().equals(schema)
    except (OSError, pa.ArrowInvalid):
        return False


def _write(table: pa.Table, path: Path) -> None:
    """Write via a temporary name so an interrupted run never leaves a truncated file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".parquet.tmp")
    pq.write_table(table, tmp, row_group_size=256 * 1024)
    tmp.replace(path)


def write_history(
    path: Path, view: int, features: int, entities: int, rows: int, seed: int
) -> bool:
    """Write one feature view's history; False when a current file was kept."""
    schema = history_schema(view, features)
    if _is_current(path, rows, schema):
        return False
    # One generator per view, so a view's data does not depend on how many views are made.
    rng = np.random.default_rng([seed, view])
    users, ts = _keys(rng, rows, entities)
    order = np.argsort(ts, kind="stable")
    values = rng.standard_normal((features, rows))
    columns = [pa.array(users[order]), _timestamps(ts[order])]
    columns += [pa.array(values[j][order]) for j in range(features)]
    _write(pa.Table.from_arrays(columns, schema=schema), path)
    return True


def write_spine(path: Path, rows: int, entities: int, seed: int) -> bool:
    """Write the spine (entity rows to look features up for); False when kept."""
    if _is_current(path, rows, SPINE_SCHEMA):
        return False
    rng = np.random.default_rng([seed, 1_000_003, rows])
    users, ts = _keys(rng, rows, entities)
    table = pa.Table.from_arrays([pa.array(users), _timestamps(ts)], schema=SPINE_SCHEMA)
    _write(table, path)
    return True


def generate(
    root: Path,
    spine_rows: int,
    views: int = 10,
    features: int = 100,
    entities: int = 2000,
    history_rows: int = 50_000,
    seed: int = 7,
) -> dict[str, Any]:
    """Write (or keep) the history of every view and the spine; describe what is there."""
    root = Path(root)
    history = [root / "history" / f"fv{i}.parquet" for i in range(views)]
    written = [
        str(p)
        for i, p in enumerate(history)
        if write_history(p, i, features, entities, history_rows, seed)
    ]
    spine = spine_path(root, spine_rows)
    if write_spine(spine, spine_rows, entities, seed):
        written.append(str(spine))
    return {
        "root": str(root),
        "history": [str(p) for p in history],
        "spine": str(spine),
        "views": views,
        "features": features,
        "entities": entities,
        "history_rows": history_rows,
        "spine_rows": spine_rows,
        "seed": seed,
        "window": [(END - SPAN).isoformat(), END.isoformat()],
        "history_bytes": sum(p.stat().st_size for p in history),
        "spine_bytes": spine.stat().st_size,
        "written": written,
    }


def spine_path(root: Path, spine_rows: int) -> Path:
    """Where the spine of ``spine_rows`` rows lives."""
    return Path(root) / f"spine_{spine_rows}.parquet"


def feature_refs(views: int = 10, features: int = 100) -> list[str]:
    """Every feature as Feast names it: ``fv{i}:fv{i}_f{j}``."""
    return [f"fv{i}:fv{i}_f{j}" for i in range(views) for j in range(features)]


def read_spine(root: Path, spine_rows: int) -> pd.DataFrame:
    """The spine as pandas (small spines only: the tiny correctness checks)."""
    return pq.read_table(spine_path(root, spine_rows)).to_pandas()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, required=True)
    ap.add_argument("--spine", type=int, nargs="+", default=[17_000], help="spine sizes")
    ap.add_argument("--views", type=int, default=10)
    ap.add_argument("--features", type=int, default=100)
    ap.add_argument("--entities", type=int, default=2000)
    ap.add_argument("--history-rows", type=int, default=50_000)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    for rows in args.spine:
        info = generate(
            args.root,
            rows,
            views=args.views,
            features=args.features,
            entities=args.entities,
            history_rows=args.history_rows,
            seed=args.seed,
        )
        print(json.dumps(info, indent=2))


if __name__ == "__main__":
    main()
