"""What watching a stack costs: the CPU the sampler takes from the rig and from each service.

The rig judges times it observes; on a 2-core machine every core-second the watching takes
is one the engines, smg, Toxiproxy and the rig's own clients wait for. This starts a stack,
measures each service's process group and the rig's own process for ``--seconds`` idle, then
for as long again with the sampler at its 10 Hz, and prints the shares of a core.

Run: ``.venv/bin/python bench/sampler_cost.py [--target embedded|sglang-cpu ...]`` on an
otherwise idle machine (sglang-cpu needs ``make setup-sglang``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

from target_costs import group_stats  # bench/ is on the path of a script run from it

from chaos.observe.history import History
from chaos.observe.sampler import Sampler, metrics_urls
from chaos.system.ports import BASES
from chaos.targets.registry import LOCAL, TargetChoice
from chaos.targets.stack import StackConfig

_TICK = os.sysconf("SC_CLK_TCK")


def group_cpu_s(pgid: int) -> float:
    """User and system CPU seconds of every process in a process group."""
    return sum(int(fields[11]) + int(fields[12]) for _, fields in group_stats(pgid)) / _TICK  # utime, stime


def shares(groups: dict[str, int], seconds: float) -> dict[str, float]:
    """Each group's and the rig's CPU over ``seconds`` of wall time, in shares of one core."""
    before = {name: group_cpu_s(pgid) for name, pgid in groups.items()}
    rig = time.process_time()
    threading.Event().wait(seconds)  # the measured interval itself: nothing to wait for
    out = {name: (group_cpu_s(pgid) - before[name]) / seconds for name, pgid in groups.items()}
    out["rig"] = (time.process_time() - rig) / seconds
    return out


def measure(target: str, port_base: int, seconds: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        stack = TargetChoice(target).start(StackConfig(port_base=port_base, state_dir=Path(tmp)))
        try:
            groups = {name: int(rec["pid"]) for name, rec in stack.info.services.items()}
            idle = shares(groups, seconds)
            with Sampler(History(), metrics_urls(stack.info.endpoints)):
                watched = shares(groups, seconds)
        finally:
            stack.down()
    rows = ", ".join(f"{name} {watched[name]:.2f} (idle {idle[name]:.2f})" for name in watched)
    print(f"{target}: CPU in cores with the sampler at 10 Hz: {rows}; total {sum(watched.values()):.2f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--target", action="append", choices=LOCAL, help="repeatable (default: all local targets)")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--port-base", type=int, default=BASES["bench-costs"])
    args = ap.parse_args()
    for target in args.target or LOCAL:
        measure(target, args.port_base, args.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
