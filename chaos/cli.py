"""``pdchaos``: bring a stack up and down, show its status, act on one of its services or
links, redraw reports, run the kill matrix.

Every error is one line on stderr and a non-zero exit; nothing is left running after a
failed ``up``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Callable

from chaos.errors import ChaosError, ConfigError
from chaos.explore import command as explore_command
from chaos.faults.held import link_command
from chaos.system.cleanup import terminate_as_interrupt
from chaos.system.ports import BASES, ephemeral_overlap
from chaos.targets.base import ENGINE_LINKS, SERVICES, Target
from chaos.targets.gpu import GPU
from chaos.targets.registry import TARGETS, TargetChoice, load_target
from chaos.targets.stack import STACK_PORTS, StackConfig
from chaos.targets.stackfile import LINK_COMMANDS, SVC_ACTIONS, describe

__all__ = ["main"]

DEFAULT_STATE_DIR = Path(os.environ.get("PDCHAOS_STATE_DIR", ".pdchaos"))
DEFAULT_PORT_BASE = int(os.environ.get("PDCHAOS_PORT_BASE", BASES["up"]))
CLEAN_LOG_TAIL = 40  # lines: pytest's short summary of the failed tests


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pdchaos", description="Chaos testing for prefill/decode disaggregated SGLang serving."
    )
    p.add_argument(
        "--state-dir", type=Path, default=DEFAULT_STATE_DIR, help="where stack.json and logs live (default: .pdchaos)"
    )
    sub = p.add_subparsers(dest="command", required=True)
    up = sub.add_parser(
        "up",
        help="start a stack: Toxiproxy, prefill and decode (pdsim, or SGLang with sglang-cpu and compose-gpu), smg",
    )
    up.add_argument(
        "--target",
        choices=[t for t in TARGETS if t != "attach"],
        default=os.environ.get("PDCHAOS_TARGET", "embedded"),
        help="local processes (embedded: pdsim, the default; sglang-cpu: real SGLang on CPU) or Compose containers (env PDCHAOS_TARGET)",
    )
    up.add_argument(
        "--port-base",
        type=int,
        default=DEFAULT_PORT_BASE,
        help=f"first of {STACK_PORTS} consecutive ports (default: {BASES['up']})",
    )
    up.add_argument("--json", action="store_true", help="print stack.json on stdout")
    sub.add_parser("status", help="show the running stack and whether each service is alive")
    sub.add_parser("down", help="stop every service of the stack")
    svc = sub.add_parser("svc", help="act on one service of the stack (what an attach stack file's commands may call)")
    svc.add_argument("action", choices=SVC_ACTIONS, help="running/frozen answer by exit status (0 = yes)")
    svc.add_argument("service", choices=SERVICES)
    lnk = sub.add_parser(
        "link",
        help="break or heal an engine link of the stack with packet rules (sglang-cpu), one call at a time: what an attach stack file's links commands may call",
    )
    lnk.add_argument("link", choices=ENGINE_LINKS)
    lnk.add_argument("action", choices=LINK_COMMANDS, help="active answers by exit status (0 = a fault is on the link)")
    lnk.add_argument("--rate-kbit", type=int, help="crawl: the link's rate in kbit/s")
    sfile = sub.add_parser(
        "stack-file",
        help="print the attach stack file of the stack: its endpoints, and pdchaos svc and link calls as its commands",
    )
    sfile.add_argument(
        "--links",
        default=None,
        help="links to give commands for, comma-separated (default: those the stack breaks with packet rules)",
    )
    doc = sub.add_parser("doctor", help="read-only live look: where is a stuck request stuck (never injects a fault)")
    doc.add_argument(
        "--target", choices=TARGETS, help="the stack in --state-dir (default), or attach with --stack-file"
    )
    doc.add_argument(
        "--stack-file",
        type=Path,
        help="YAML description of a deployment pd-chaos did not start (implies --target attach)",
    )
    doc.add_argument("--window", type=float, default=10.0, help="seconds to sample at 20 Hz (default 10)")
    doc.add_argument(
        "--probe",
        action="store_true",
        help="after the window, send one fresh short request to the router (and through the client's path)",
    )
    doc.add_argument(
        "--logs-since",
        default="10m",
        help="look for open requests started since: 90s, 10m, 2h, an ISO time or epoch seconds (default 10m)",
    )
    doc.add_argument(
        "--reports-dir", type=Path, default=Path("reports"), help="where doctor-<time>/ goes (default reports/)"
    )
    doc.add_argument("--json", action="store_true", help="print the report as JSON instead of a table")
    rep = sub.add_parser("report", help="draw a run's reports again from its saved histories")
    rep.add_argument(
        "run", nargs="?", type=Path, default=Path("reports/latest"), help="run folder (default: reports/latest)"
    )
    mut = sub.add_parser("mutants", help="the kill matrix: run the suites clean and once per pdsim defect")
    mut.add_argument("--json", type=Path, help="write the results as JSON to this path")
    mut.add_argument("--only", action="append", help="run only this defect (repeatable; 'clean' for the clean run)")
    mut.add_argument("--jobs", type=int, default=2, help="defect runs at a time (default 2)")
    mut.add_argument(
        "--port-base",
        type=int,
        default=BASES["mutants"],
        help=f"first port of the ranges the runs use (default {BASES['mutants']})",
    )
    mut.add_argument("--suites", default="suites", help="what pytest runs (default: suites)")
    explore_command.add_parser(sub)
    con = sub.add_parser(
        "conform",
        help="start pdsim and a real-SGLang target side by side, send both the same probes, diff what they show",
    )
    con.add_argument(
        "--against",
        choices=("sglang-cpu", "compose-sglang-cpu"),
        default="sglang-cpu",
        help="the real engine's target (default sglang-cpu)",
    )
    con.add_argument(
        "--port-base",
        type=int,
        default=BASES["conform"],
        help=f"first port of the pdsim stack; the other takes the next 100 (default {BASES['conform']})",
    )
    con.add_argument("--json", type=Path, help="write both observations and the diff as JSON to this path")
    gpu = sub.add_parser(
        "gpu-check",
        help="can this host run the GPU suites? GPUs, driver, Docker and its NVIDIA runtime, images, model, disk (starts nothing)",
    )
    gpu.add_argument(
        "--target",
        choices=GPU,
        default=os.environ.get("PDCHAOS_TARGET") if os.environ.get("PDCHAOS_TARGET") in GPU else "compose-gpu",
    )
    gpu.add_argument("--json", action="store_true", help="print the checks as JSON")
    return p


def _gpu_check(args: argparse.Namespace) -> int:
    """Exit 0 when the host can run the target's suites, 2 when something is missing."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from chaos.targets.gpuhost import MISSING, LocalHost, as_json, check_host

    checks = check_host(args.target, LocalHost())
    if args.json:
        print(as_json(checks))
    else:
        table = Table("check", "state", "found", "fix", title=f"{args.target} on this host")
        for c in checks:
            table.add_row(
                escape(c.name),
                c.state,
                escape(c.found),
                escape(c.fix),
                style={"ok": None, "warning": "yellow"}.get(c.state, "red"),
            )
        Console(width=200).print(table)
    missing = [c.name for c in checks if c.state == MISSING]
    if missing:
        print(f"pdchaos gpu-check: missing: {', '.join(missing)}; nothing was started", file=sys.stderr)
    return 2 if missing else 0


def _conform(args: argparse.Namespace) -> int:
    """Exit 0 when the differences are exactly those listed in chaos.run.conform.INTENDED, 1 otherwise."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from chaos.run.conform import diff, observe
    from chaos.system.cleanup import shielded

    seen: dict[str, dict[str, str]] = {}
    for name, base in (("embedded", args.port_base), (args.against, args.port_base + 100)):
        stack = TargetChoice(name).start(StackConfig(port_base=base, state_dir=args.state_dir / f"conform-{name}"))
        try:
            seen[name] = observe(stack.info)
        finally:
            with shielded():
                stack.down()
    rows = diff(seen["embedded"], seen[args.against])
    table = Table("probe", "pdsim", args.against, "intended difference", title="pdsim against real SGLang")
    for r in rows:
        table.add_row(
            escape(r.probe),
            escape(r.base),
            escape(r.other),
            escape(r.intended),
            style=None if not r.differs else "green" if r.intended else "red",
        )
    Console().print(table)
    if args.json:
        args.json.write_text(json.dumps({"observed": seen, "diff": [r.__dict__ for r in rows if r.differs]}, indent=2))
    unintended = [r for r in rows if r.differs and not r.intended]
    stale = [r.probe for r in rows if r.intended and not r.differs]
    print(f"{len(rows)} probes, {sum(r.differs for r in rows)} differences, {len(unintended)} not intended")
    if stale:
        print(f"listed as intended but now alike (drop them from chaos.run.conform.INTENDED): {', '.join(stale)}")
    return 1 if unintended or stale else 0


def _status(target: Target) -> dict[str, object]:
    info = target.info
    services = {}
    for n in SERVICES:
        running = target.is_running(n)  # one look per question: on Compose each is a docker API call
        services[n] = {"running": running, "frozen": running and target.is_frozen(n)}
    return {
        "kind": info.kind,
        "run_id": info.run_id,
        "endpoints": info.endpoints,
        "services": services,
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


def _stack_file(target: Target, links: str | None) -> str:
    import yaml

    chosen = tuple(getattr(target, "packet_links", ())) if links is None else tuple(x for x in links.split(",") if x)
    return yaml.safe_dump(
        describe(target.info, str(Path(sys.argv[0]).resolve()), links=chosen), sort_keys=False, width=200
    )


def _mutants(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from chaos.run.mutants import matrix_ok, run_matrix, to_json, to_markdown

    out = (Path("reports") / f"mutants-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    t0 = time.monotonic()
    results = run_matrix(only=args.only, jobs=args.jobs, out_dir=out, port_base=args.port_base, suites=args.suites)
    table = Table(title=f"kill matrix ({time.monotonic() - t0:.0f} s)")
    for col in ("defect", "result", "first failing test", "verdict", "s"):
        table.add_column(col, overflow="fold")
    for r in results:
        table.add_row(
            r.defect,
            r.state,
            escape(r.tests_failed[0] if r.tests_failed else ""),
            escape((r.verdict or r.rig_error)[:120]),
            f"{r.seconds:.0f}",
        )
    Console(width=200).print(table)
    for r in results:  # CI keeps the end of its log: say there what failed in a failed clean run
        if r.defect == "clean" and not r.as_expected:
            print(f"the clean run failed; the end of its log ({r.log}):")
            print("\n".join(Path(r.log).read_text(errors="replace").splitlines()[-CLEAN_LOG_TAIL:]))
    (out / "summary.md").write_text(f"# Kill matrix\n\n{to_markdown(results)}")
    if args.json:
        args.json.write_text(to_json(results))
    ok = matrix_ok(results)
    print(f"kill matrix: {'OK' if ok else 'NOT OK'} (details in {out})")
    return 0 if ok else 1


def parse_since(text: str, now: float) -> float:
    """``90s``/``10m``/``2h`` ago, an ISO time (local), or epoch seconds -> wall seconds."""
    units = {"s": 1, "m": 60, "h": 3600}
    try:
        if text[-1:] in units and text[:-1].replace(".", "", 1).isdigit():
            return now - float(text[:-1]) * units[text[-1]]
        if text.replace(".", "", 1).isdigit():
            return float(text)
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        raise ConfigError(
            f"--logs-since {text!r}: expected 90s, 10m, 2h, YYYY-MM-DDTHH:MM:SS or epoch seconds"
        ) from None


def _doctor(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from chaos.doctor import run_doctor, write_report
    from chaos.targets.attach import AttachedStack

    if args.stack_file is not None or args.target == "attach":
        if args.stack_file is None:
            raise ConfigError("doctor --target attach needs --stack-file FILE")
        target: Target = AttachedStack.from_file(args.stack_file)
    else:
        target = load_target(args.state_dir)
        if args.target and args.target != target.info.kind:
            raise ConfigError(f"the stack in {args.state_dir} is a {target.info.kind!r} stack, not {args.target!r}")
    if args.window <= 0:
        raise ConfigError("--window must be positive")
    since = parse_since(args.logs_since, time.time())
    report = run_doctor(target, window_s=args.window, probe=args.probe, logs_since=since)
    folder = write_report(report, args.reports_dir)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
        return 0 if report.diagnosis.ok else 3
    console = Console(width=160)
    table = Table(
        title=f"pdchaos doctor: {report.target} stack, {report.window_s:g} s at {1 / report.interval_s:.0f} Hz"
    )
    for col in (
        "hop",
        "min",
        "max",
        "last",
        "shape",
        "verdict",
        "progress",
        "3 s sampler reads it pinned",
        "open requests (logs)",
    ):
        table.add_column(col, overflow="fold")
    for st in report.stats:
        ids = report.open_requests.get(st.hop, [])
        share = "-" if st.coarse_pinned_share is None else f"{st.coarse_pinned_share:.0%} of phases"
        cells = ["-" if x is None else f"{x:g}" for x in (st.min, st.max, st.last)]
        table.add_row(
            st.hop,
            *cells,
            st.shape,
            st.verdict,
            f"{st.progress:g}",
            share,
            escape(f"{len(ids)}: {' '.join(ids[:4])}{' ...' if len(ids) > 4 else ''}" if ids else ""),
        )
    console.print(table)
    for name, why in report.unreachable.items():
        console.print(f"[red]{name} did not answer /metrics[/red]: {why}")
    for via, p in report.probes.items():
        console.print(
            f"probe via {via} ({p['url']}): {p['outcome']} in {p['seconds']:.2f} s {escape(p['error'][:100])}"
        )
    console.print(escape(report.diagnosis.line()), style="bold")
    console.print(f"report: {folder / 'doctor.json'}, {folder / 'timeline.png'}")
    return 0 if report.diagnosis.ok else 3


def _up(args: argparse.Namespace) -> int:
    if warning := ephemeral_overlap(args.port_base):
        print(f"pdchaos: warning: {warning}", file=sys.stderr)
    stack = TargetChoice(args.target).start(StackConfig(port_base=args.port_base, state_dir=args.state_dir))
    if args.json:
        print(stack.info.to_json())
    else:
        print(
            f"stack {stack.info.run_id} up: client endpoint {stack.info.endpoints['client']} (state in {stack.info.path})"
        )
    return 0


def _down(args: argparse.Namespace) -> int:
    load_target(args.state_dir).down()
    print("stack down")
    return 0


def _link(args: argparse.Namespace) -> int:
    status, line = link_command(load_target(args.state_dir), args.link, args.action, rate_kbit=args.rate_kbit)
    print(line)
    return status


def _report(args: argparse.Namespace) -> int:
    from chaos.reports.summary import render_run

    if not args.run.is_dir():
        raise ConfigError(f"no run folder at {args.run}")
    n = render_run(args.run.resolve())
    print(f"{n} test reports drawn again in {args.run.resolve()} (summary.md, per test timeline.png and stuck.md)")
    return 0


def _printed(text: str, end: str = "\n") -> int:
    print(text, end=end)
    return 0


# each subcommand: what it does with the parsed arguments, and the exit status it returns
COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "up": _up,
    "status": lambda args: _printed(json.dumps(_status(load_target(args.state_dir)), indent=2)),
    "down": _down,
    "svc": lambda args: _svc(load_target(args.state_dir), args.action, args.service),
    "link": _link,
    "stack-file": lambda args: _printed(_stack_file(load_target(args.state_dir), args.links), end=""),
    "doctor": _doctor,
    "mutants": _mutants,
    "explore": explore_command.run,
    "conform": _conform,
    "gpu-check": _gpu_check,
    "report": _report,
}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    terminate_as_interrupt()
    try:
        return COMMANDS[args.command](args)
    except ChaosError as exc:
        print(f"pdchaos: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("pdchaos: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
