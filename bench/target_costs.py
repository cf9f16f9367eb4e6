"""What a local target costs: time to bring the stack up, resident memory of each service
once idle, time to restart decode alone, and time to take it down.

Run: ``.venv/bin/python bench/target_costs.py [--target embedded|sglang-cpu ...]`` on an
otherwise idle machine (sglang-cpu needs ``make setup-sglang``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

from chaos.system.ports import BASES
from chaos.targets.registry import LOCAL, TargetChoice
from chaos.targets.stack import StackConfig


def group_stats(pgid: int) -> Iterator[tuple[Path, list[str]]]:
    """Each process of a process group: its /proc folder and its stat fields after the name
    (field 5 of stat, the process group, is the third of them)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
            if int(fields[2]) == pgid:
                yield stat.parent, fields
        except (OSError, ValueError, IndexError):
            continue


def rss_mib(pid: int) -> float:
    """Resident memory of a process group's leader and every process in its group."""
    total = 0
    for proc, _ in group_stats(pid):
        try:
            total += int((proc / "statm").read_text().split()[1]) * 4096
        except (OSError, ValueError, IndexError):
            continue
    return total / 2**20


def measure(target: str, port_base: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.monotonic()
        stack = TargetChoice(target).start(StackConfig(port_base=port_base, state_dir=Path(tmp)))
        up = time.monotonic() - t0
        try:
            mem = {name: rss_mib(int(rec["pid"])) for name, rec in stack.info.services.items()}
            t0 = time.monotonic()
            stack.restart("decode")
            restart = time.monotonic() - t0
        finally:
            t0 = time.monotonic()
            stack.down()
            down = time.monotonic() - t0
    memory = ", ".join(f"{name} {mib:.0f} MiB" for name, mib in mem.items())
    print(f"{target}: up {up:.1f} s, decode restart {restart:.1f} s, down {down:.1f} s; RSS {memory}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--target", action="append", choices=LOCAL, help="repeatable (default: all local targets)")
    ap.add_argument("--port-base", type=int, default=BASES["bench-costs"])
    args = ap.parse_args()
    for target in args.target or LOCAL:
        measure(target, args.port_base)
    return 0


if __name__ == "__main__":
    sys.exit(main())
