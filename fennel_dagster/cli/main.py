"""The ``fennel-dagster`` command: one sub-command module per area."""

from __future__ import annotations

import argparse
import sys

from fennel_dagster.cli import backfill, demo, dev, engine, serve, settings, stack
from fennel_dagster.stack.process import StackError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fennel-dagster",
        description="fennel_dagster: the local stack, the Dagster UI, and the platform settings.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    stack.register(sub)
    dev.register(sub)
    engine.register(sub)
    serve.register(sub)
    backfill.register(sub)
    demo.register(sub)
    settings.register(sub)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        code = args.func(args)
    except StackError as e:
        print(f"error: {e}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:  # Ctrl-C before a command set up its own stop: no traceback
        print("interrupted", file=sys.stderr)
        code = 130
    raise SystemExit(code)


if __name__ == "__main__":
    main()
