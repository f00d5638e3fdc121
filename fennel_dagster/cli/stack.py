"""``fennel-dagster stack up|down|status|logs|ports``."""

from __future__ import annotations

import argparse
import subprocess
import sys

from fennel_dagster import stack
from fennel_dagster.settings import get_settings
from fennel_dagster.stack import ports


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("stack", help="start, stop and inspect the local stack of services")
    actions = p.add_subparsers(dest="action", required=True)
    for name, help_ in [
        ("up", "start every service that is not running (idempotent)"),
        ("down", "stop the services this stack started"),
        ("status", "show each service, its endpoint and health"),
    ]:
        a = actions.add_parser(name, help=help_)
        a.add_argument("services", nargs="*", help=f"subset of: {', '.join(stack.SERVICES)}")
        a.set_defaults(func=_run)
    logs = actions.add_parser("logs", help="print (or follow) a service's log")
    logs.add_argument("service", choices=[*stack.SERVICES, *PROCESS_LOGS])
    logs.add_argument("-f", "--follow", action="store_true")
    logs.add_argument("-n", "--lines", type=int, default=50)
    logs.set_defaults(func=_logs)
    pp = actions.add_parser(
        "ports", help="list the stack's ports and whether another process holds one"
    )
    pp.add_argument(
        "--reassign-busy",
        action="store_true",
        help="print `export FENNEL_..._PORT=n` for each default another process holds "
        '(use: eval "$(fennel-dagster stack ports --reassign-busy)")',
    )
    pp.set_defaults(func=_ports)


def _run(args: argparse.Namespace) -> int:
    settings = get_settings()
    if args.action == "up":
        print(f"stack home {settings.home_dir}")
        results = stack.up(settings, args.services, report=lambda s: print(s.line(), flush=True))
    elif args.action == "down":
        results = stack.down(settings, args.services)
        for s in results:
            print(f"{s.name:<9} {s.action}")
        return 0
    else:
        results = stack.status(settings, args.services)
        for s in results:
            print(s.line())
    return 0 if all(s.health.ok for s in results) else 1


# what `fennel-dagster demo` runs beside the services writes its output here (logs_dir)
PROCESS_LOGS = ("dagster", "query-server")


def _logs(args: argparse.Namespace) -> int:
    settings = get_settings()
    if args.service in PROCESS_LOGS:
        path = str(settings.logs_dir / f"{args.service}.log")
    else:
        path = stack.log_path(settings, args.service)
    cmd = ["tail", f"-n{args.lines}"] + (["-F"] if args.follow else []) + [path]
    return subprocess.call(cmd, stdout=sys.stdout)


def _ports(args: argparse.Namespace) -> int:
    settings = get_settings()
    ours = stack.running(settings)
    if args.reassign_busy:
        for env, number in ports.reassign_busy(settings, ours).items():
            print(f"export {env}={number}")
        return 0
    for p in ports.ports(settings):
        if p.service in ours:
            state = "in use by this stack"
        else:
            state = "free" if ports.bindable(settings.host, p.number) else "in use"
        print(f"{p.service:<9} {p.number:<6} {p.env:<30} {state}")
    return 0
