"""The offline point-in-time benchmark, side by side in one run (Feast issue #3003's shape).

For each spine size: Feast 0.67's ``get_historical_features`` on its Spark offline store
(``bench/offline_feast.py`` in its own venv, made by ``bench/feast_env.sh``), then this
platform's ``query_offline`` on Spark (``bench/offline_ours.py``), over the same files
(``bench.offline_data``: 10 views x 100 float features, 50k history rows per view, 2,000
users, 30 days), each in a process tree of its own with the same Spark settings (local[N],
driver heap, shuffle partitions); wall time of query + Parquet write, and peak RSS.
Both outputs are checked against pandas' ``merge_asof`` on two feature columns.

    .venv/bin/python -m bench.offline_bench --spines 17000 170000

writes ``bench/results/offline.md``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "bench" / ".work" / "offline"
FEAST_PY = ROOT / "bench" / ".work" / "feast-venv" / "bin" / "python"


def run(cmd: list[str], out: Path) -> dict[str, Any]:
    subprocess.run(cmd, cwd=ROOT, check=False, stdout=subprocess.DEVNULL)
    if not out.exists():
        return {"error": f"no result from {' '.join(cmd[:3])}"}
    row: dict[str, Any] = json.loads(out.read_text())
    return row


def cell(row: dict[str, Any], key: str, fmt: str = "{:,.1f}") -> str:
    if "error" in row:
        return "failed"
    return fmt.format(row[key])


def table(rows: list[tuple[int, dict[str, Any], dict[str, Any]]], cores: int) -> str:
    lines = [
        f"Spark `local[{cores}]`, driver heap 8g, 16 shuffle partitions for both; 10 views x 100 "
        "features (1,000), 50k history rows per view. Wall: query + Parquet write (start-up "
        "excluded); RSS: peak of the process tree (Python + JVM). Spark floor: in our session "
        "after the query, reading every view's offline table whole plus writing a spine-sized "
        "Parquet of 1,000 computed columns, no join (`offline_ours.floor_of`): no Spark plan "
        "of this query takes less, so Feast wall / floor bounds any Spark speed-up.",
        "",
        "| spine rows | Feast wall s | ours wall s | speed-up | Spark floor s (read + write) "
        "| Feast / floor | Feast peak RSS MB | ours peak RSS MB | Feast = merge_asof "
        "| ours = merge_asof |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|:---:|:---:|",
    ]
    for spine, feast, ours in rows:
        ratio = (f"{feast['wall_s'] / ours['wall_s']:.2f}x"
                 if "error" not in feast and "error" not in ours else "-")  # fmt: skip
        bound = (f"{feast['wall_s'] / ours['floor_s']:.2f}x"
                 if "error" not in feast and "floor_s" in ours else "-")  # fmt: skip
        floor = (f"{ours['floor_s']:,.1f} ({ours['floor_read_s']:,.1f} + "
                 f"{ours['floor_write_s']:,.1f})" if "floor_s" in ours else "-")  # fmt: skip
        lines.append(
            f"| {spine:,} | {cell(feast, 'wall_s')} | {cell(ours, 'wall_s')} | {ratio} | "
            f"{floor} | {bound} | "
            f"{cell(feast, 'peak_rss_mb', '{:,.0f}')} | {cell(ours, 'peak_rss_mb', '{:,.0f}')} | "
            f"{_checked(feast)} | {_checked(ours)} |"
        )
    errors = [f"- {c} at {s:,}: {r['error']}" for s, f, o in rows
              for c, r in (("Feast", f), ("ours", o)) if "error" in r]  # fmt: skip
    return "\n".join(lines + ([""] + errors if errors else [])) + "\n"


def _checked(row: dict[str, Any]) -> str:
    check = row.get("check") or {}
    cols = [v for k, v in check.items() if isinstance(v, dict)]
    if not cols:
        return "-"
    return "yes" if all(c.get("equal_to_merge_asof") for c in cols) else "**no**"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spines", type=int, nargs="+", default=[17_000, 170_000])
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=1800.0)
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "results" / "offline.md")
    args = ap.parse_args()
    subprocess.run(["bash", "bench/feast_env.sh"], cwd=ROOT, check=True)
    py = sys.executable
    subprocess.run([str(FEAST_PY), "-m", "bench.offline_data", "--root", str(WORK), "--spine",
                    *map(str, args.spines)], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)  # fmt: skip
    rows = []
    for spine in args.spines:
        common = ["--root", str(WORK), "--spine", str(spine), "--cores", str(args.cores),
                  "--timeout", str(args.timeout)]  # fmt: skip
        feast_out, ours_out = WORK / f"feast_{spine}.json", WORK / f"ours_{spine}.json"
        feast_out.unlink(missing_ok=True)
        ours_out.unlink(missing_ok=True)
        feast = run([str(FEAST_PY), "bench/offline_feast.py", *common, "--out", str(feast_out)],
                    feast_out)  # fmt: skip
        if "error" not in feast:
            check = WORK / f"feast_check_{spine}.json"
            subprocess.run([str(FEAST_PY), "bench/offline_feast.py", "--root", str(WORK),
                            "--spine", str(spine), "--check", "--out", str(check)], cwd=ROOT,
                           check=False, stdout=subprocess.DEVNULL)  # fmt: skip
            if check.exists():
                feast["check"] = json.loads(check.read_text()).get("full_output", {})
        ours = run([py, "-m", "bench.offline_ours", *common, "--out", str(ours_out)], ours_out)
        rows.append((spine, feast, ours))
        print(json.dumps({"spine": spine, "feast": feast, "ours": ours}, indent=2), flush=True)
    text = "# Offline point-in-time queries: ours vs Feast (Spark offline store)\n\n"
    text += table(rows, args.cores)
    args.results.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
