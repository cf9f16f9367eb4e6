"""``pdchaos explore``: its options and what it prints. Exit status: 0 when every episode
was judged and nothing new failed, 1 when an invariant failed that no known issue explains
(a find, or a flaky one: it failed once and in no rerun), 2 when nothing was found but some
episode could not be judged (a rig error), or too many could not (``chaos.explore.health``)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from chaos.errors import ConfigError
from chaos.explore.health import unhealthy
from chaos.explore.run import Budget, Explorer, explore
from chaos.run.soak import parse_duration
from chaos.system.ports import BASES, ephemeral_overlap
from chaos.system.topology import Topology
from chaos.targets.registry import TARGETS, TargetChoice

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "explore", help="seeded random fault schedules judged by universal invariants; finds shrunk to reproducers"
    )
    p.add_argument("--target", choices=TARGETS, default="embedded", help="where to explore (default embedded)")
    p.add_argument("--seed", type=int, default=1, help="the schedules' seed: the same seed draws the same episodes")
    p.add_argument("--budget", default="10m", help="a time (90s, 10m, 1h) or a number of episodes (default 10m)")
    p.add_argument(
        "--shrink-budget",
        type=_duration,
        default="5m",
        help="time to shrink each find: 90s, 5m, or plain seconds (default 5m)",
    )
    p.add_argument("--reruns", type=int, default=5, help="runs of each reproducer to measure its rate (default 5)")
    p.add_argument("--max-steps", type=int, default=3, help="steps of a drawn schedule at most (default 3)")
    p.add_argument("--until-found", action="store_true", help="stop after the first find (bench/explore_finds.py)")
    p.add_argument("--defects", default="", help="pdsim defects to plant (PDSIM_DEFECTS), to test explore itself")
    p.add_argument(
        "--topology",
        type=_topology,
        default=Topology(),
        help="N prefills and M decodes behind the router (1p1d, 2p1d, 1p2d, 2p2d; default 1p1d): faults strike any engine",
    )
    p.add_argument("--out", type=Path, help="report folder (default reports/explore-<time>)")
    p.add_argument("--stack-file", type=Path, help="with --target attach: the deployment's stack file")
    p.add_argument(
        "--allow-destructive", action="store_true", help="with --target attach: let faults kill, freeze, restart"
    )
    p.add_argument("--port-base", type=int, default=BASES["explore"], help=f"first port (default {BASES['explore']})")


def _topology(text: str) -> Topology:
    try:
        return Topology.parse(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _duration(text: str) -> float:
    """A time for argparse: its own error (exit 2) for one that is not, never a default."""
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    if warning := ephemeral_overlap(args.port_base):
        print(f"pdchaos: warning: {warning}")
    out = (args.out or Path("reports") / f"explore-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    try:
        choice = TargetChoice(args.target, args.stack_file, args.allow_destructive)
        explorer = Explorer.of(
            choice, seed=args.seed, out=out, port_base=args.port_base, defects=args.defects, topology=args.topology
        )
    except ConfigError as exc:
        print(f"pdchaos explore: {exc}")
        return 2
    print(
        f"explore: target {args.target}, topology {args.topology}, seed {args.seed}, budget {args.budget}, "
        f"report in {out}",
        flush=True,
    )
    episodes, finds = explore(
        explorer,
        Budget.parse(args.budget),
        shrink_budget_s=args.shrink_budget,
        reruns=args.reruns,
        max_steps=args.max_steps,
        until_found=args.until_found,
        say=lambda line: print(line, flush=True),
    )
    print((out / "explore.md").read_text())
    if finds:
        return 1
    return 2 if any(ep.state == "rig error" for ep in episodes) or unhealthy(episodes) else 0
