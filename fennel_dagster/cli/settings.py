"""``fennel-dagster settings``: the effective settings, as shell exports or JSON."""

from __future__ import annotations

import argparse
import json
import shlex

from fennel_dagster.settings import get_settings, settings_file


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "settings", help="print the effective settings (`eval $(fennel-dagster settings)`)"
    )
    p.add_argument("--json", action="store_true", help="JSON with the derived endpoints too")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    s = get_settings()
    if args.json:
        out = {
            **{k: str(v) if v is not None else None for k, v in s.model_dump().items()},
            "settings_file": str(settings_file() or ""),
            "home_dir": str(s.home_dir),
            "platform_pg_dsn": s.platform_pg_dsn,
            "dagster_pg_url": s.dagster_pg_url,
            "kafka_servers": s.kafka_servers,
            "s3_url": s.s3_url,
            "state_path": str(s.state_path),
            "spark_jars_path": str(s.spark_jars_path),
            "dagster_home_path": str(s.dagster_home_path),
            "dagster_url": s.dagster_url,
        }
        print(json.dumps(out, indent=2))
    else:
        # DAGSTER_HOME too, so `dagster dev` / `dg dev` share fennel-dagster's instance folder
        exports = {**s.as_env(), "DAGSTER_HOME": str(s.dagster_home_path)}
        for key, value in exports.items():
            print(f"export {key}={shlex.quote(value)}")
    return 0
