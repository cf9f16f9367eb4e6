"""``pdchaos``: bring a stack up and down, show its status, act on one of its services,
redraw reports, run the kill matrix.

Every error is one line on stderr and a non-zero exit; nothing is left running after a
failed ``up``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from chaos.cleanup import terminate_as_interrupt
from chaos.errors import ChaosError, ConfigError
from chaos.stack import StackConfig
from chaos.targets.base import SERVICES, Target
from chaos.targets.registry import TargetChoice, load_target

__all__ = ["main"]

DEFAULT_STATE_DIR = Path(os.environ.get("PDCHAOS_STATE_DIR", ".pdchaos"))
DEFAULT_PORT_BASE = int(os.environ.get("PDCHAOS_PORT_BASE", "41000"))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pdchaos", description="Chaos testing for prefill/decode disaggregated SGLang serving.")
    p.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR, help="where stack.json and logs live (default: .pdchaos)")
    sub = p.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start a stack: Toxiproxy, prefill and decode (pdsim, or SGLang with compose-gpu), smg")
    up.add_argument("--target", choices=("embedded", "compose", "compose-gpu"), default=os.environ.get("PDCHAOS_TARGET", "embedded"), help="local processes (default) or Compose containers (env PDCHAOS_TARGET)")
    up.add_argument("--port-base", type=int, default=DEFAULT_PORT_BASE, help="first of 12 consecutive ports (default: 41000)")
    up.add_argument("--json", action="store_true", help="print stack.json on stdout")
    sub.add_parser("status", help="show the running stack and whether each service is alive")
    sub.add_parser("down", help="stop every service of the stack")
    svc = sub.add_parser("svc", help="act on one service of the stack (what an attach stack file's commands may call)")
    svc.add_argument("action", choices=("running", "frozen", "kill", "start", "stop", "restart", "freeze", "thaw", "logs"), help="running/frozen answer by exit status (0 = yes)")
    svc.add_argument("service", choices=SERVICES)
    rep = sub.add_parser("report", help="draw a run's reports again from its saved histories")
    rep.add_argument("run", nargs="?", type=Path, default=Path("reports/latest"), help="run folder (default: reports/latest)")
    mut = sub.add_parser("mutants", help="the kill matrix: run the suites clean and once per pdsim defect")
    mut.add_argument("--json", type=Path, help="write the results as JSON to this path")
    mut.add_argument("--only", action="append", help="run only this defect (repeatable; 'clean' for the clean run)")
    mut.add_argument("--jobs", type=int, default=2, help="defect runs at a time (default 2)")
    mut.add_argument("--port-base", type=int, default=DEFAULT_PORT_BASE + 2000, help="first port of the ranges the runs use")
    mut.add_argument("--suites", default="suites", help="what pytest runs (default: suites)")
    return p


def _status(target: Target) -> dict[str, object]:
    info = target.info
    return {
        "kind": info.kind,
        "run_id": info.run_id,
        "endpoints": info.endpoints,
        "services": {n: {"running": target.is_running(n), "frozen": target.is_running(n) and target.is_frozen(n)} for n in SERVICES},
        "proxies": info.proxies,
    }


def _svc(target: Target, action: str, service: str) -> int:
    if action in ("running", "frozen"):
        held = target.is_running(service) and (action == "running" or target.is_frozen(service))
        return 0 if held else 1
    if action == "logs":
        sys.stdout.write(target.logs(service))
        return 0
    getattr(target, action)(service)
    return 0


def _mutants(args: argparse.Namespace) -> int:
    import time

    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from chaos.mutants import matrix_ok, run_matrix, to_json, to_markdown

    out = (Path("reports") / f"mutants-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    t0 = time.monotonic()
    results = run_matrix(only=args.only, jobs=args.jobs, out_dir=out, port_base=args.port_base, suites=args.suites)
    table = Table(title=f"kill matrix ({time.monotonic() - t0:.0f} s)")
    for col in ("defect", "result", "first failing test", "verdict", "s"):
        table.add_column(col, overflow="fold")
    for r in results:
        table.add_row(r.defect, r.state, escape(r.tests_failed[0] if r.tests_failed else ""), escape(r.verdict[:120]), f"{r.seconds:.0f}")
    Console(width=200).print(table)
    (out / "summary.md").write_text(f"# Kill matrix\n\n{to_markdown(results)}")
    if args.json:
        args.json.write_text(to_json(results))
    ok = matrix_ok(results)
    print(f"kill matrix: {'OK' if ok else 'NOT OK'} (details in {out})")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    terminate_as_interrupt()
    try:
        if args.command == "up":
            stack = TargetChoice(args.target).start(StackConfig(port_base=args.port_base, state_dir=args.state_dir))
            if args.json:
                print(stack.info.to_json())
            else:
                print(f"stack {stack.info.run_id} up: client endpoint {stack.info.endpoints['client']} (state in {stack.info.path})")
        elif args.command == "status":
            print(json.dumps(_status(load_target(args.state_dir)), indent=2))
        elif args.command == "down":
            load_target(args.state_dir).down()
            print("stack down")
        elif args.command == "svc":
            return _svc(load_target(args.state_dir), args.action, args.service)
        elif args.command == "mutants":
            return _mutants(args)
        elif args.command == "report":
            from chaos.reports.summary import render_run

            if not args.run.is_dir():
                raise ConfigError(f"no run folder at {args.run}")
            n = render_run(args.run.resolve())
            print(f"{n} test reports drawn again in {args.run.resolve()} (summary.md, per test timeline.png and stuck.md)")
    except ChaosError as exc:
        print(f"pdchaos: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("pdchaos: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
