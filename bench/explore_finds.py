"""How many of pdsim's defects ``pdchaos explore`` finds on its own, and how fast: for each
defect, explore the embedded stack with that defect planted until the first find or the
budget, shrink the find, run its reproducer again; then a table of what was found, after
how long, by which invariant, and how often the reproducer fails the same way.

    .venv/bin/python bench/explore_finds.py                            # every defect, 10 minutes each
    .venv/bin/python bench/explore_finds.py --budget 3m room_mixup leak_on_abort

No suite runs here: explore draws its own schedules, so the scenario written for each defect
(the kill matrix's ``KILLERS``) plays no part. A find is an invariant that no known issue
explains; the clean stack gives none (docs/explore.md), so a find with a defect planted is
that defect's doing, and the bench checks it: the shrunk reproducer is run on the clean
stack too (``--clean-runs``), and a find that fails there the same way is reported as
"also clean", not counted. Whether the invariant is the verdict kind the defect's own
scenario kills it with is shown, not required. An explore that could not judge its episodes
(a rig error) is reported as such, never as "not found".
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from chaos.explore.run import Budget, Explorer, explore  # noqa: E402
from chaos.run.mutants import KILLERS, defect_names  # noqa: E402
from chaos.run.soak import parse_duration  # noqa: E402
from chaos.system.cleanup import terminate_as_interrupt  # noqa: E402  (the repo is on the path first)
from chaos.system.ports import BASES  # noqa: E402
from chaos.targets.registry import TargetChoice  # noqa: E402


@dataclass
class Row:
    defect: str
    state: str  # found, also clean (the clean stack fails the same way), not found, rig error
    episodes: int
    after_s: float | None = None  # exploring time until the find
    invariant: str = ""
    killer_kind: bool | None = None  # the find's kind is the one the defect's own scenario kills with
    steps: str = ""  # drawn -> shrunk
    reproduced: str = ""
    clean: str = ""  # clean-stack runs of the reproducer that failed the same way
    reproducer: str = ""


def _one(defect: str, args: argparse.Namespace, out: Path) -> Row:
    explorer = Explorer.of(
        TargetChoice("embedded"), seed=args.seed, out=out / defect, port_base=args.port_base, defects=defect
    )
    episodes, finds = explore(
        explorer,
        Budget(seconds=args.budget),
        shrink_budget_s=args.shrink_budget,
        reruns=args.reruns,
        until_found=True,
        say=lambda line: print(f"  {defect}: {line}", flush=True),
    )
    if finds:
        f = finds[0]
        clean = replace(explorer, env={**explorer.env, "PDSIM_DEFECTS": ""})  # the same, the defect unplanted
        same = sum(
            f.signature in clean.run(f.shrunk, folder="clean", tag=f"_k{i}").signatures()
            for i in range(args.clean_runs)
        )
        return Row(
            defect,
            "also clean" if same else "found",
            len(episodes),
            f.after_s,
            str(f.signature),
            f.signature.kind == KILLERS[defect].verdict,
            f"{len(f.episode.schedule.steps)} -> {len(f.shrunk.steps)}",
            f"{f.reproduced}/{f.reruns}",
            f"{same}/{args.clean_runs}",
            str(f.reproducer),
        )
    errors = sum(ep.state == "rig error" for ep in episodes)
    return Row(defect, "rig error" if errors else "not found", len(episodes), invariant=f"{errors} rig errors")


def _markdown(rows: list[Row], args: argparse.Namespace) -> str:
    found = [r for r in rows if r.state == "found"]
    lines = [
        f"explore on embedded, seed {args.seed}, {args.budget:g} s per defect: "
        f"{len(found)} of {len(rows)} defects found",
        "",
        "| defect | found | after | episodes | invariant | its scenario's kind | steps | reproduced | fails clean |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        after = f"{r.after_s:.0f} s" if r.after_s is not None else ""
        kind = "" if r.killer_kind is None else ("yes" if r.killer_kind else "no")
        lines.append(
            f"| {r.defect} | {r.state} | {after} | {r.episodes} | {r.invariant} | {kind} | {r.steps} | {r.reproduced} "
            f"| {r.clean} |"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("defects", nargs="*", help="defects to plant, one at a time (default: every one)")
    ap.add_argument("--budget", type=parse_duration, default=600.0, help="exploring time per defect (default 10m)")
    ap.add_argument("--shrink-budget", type=parse_duration, default=180.0, help="shrinking time per find (default 3m)")
    ap.add_argument("--reruns", type=int, default=5, help="runs of each reproducer (default 5)")
    ap.add_argument("--clean-runs", type=int, default=2, help="runs of each reproducer on the clean stack (default 2)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--port-base", type=int, default=BASES["bench-explore"])
    ap.add_argument("--out", type=Path, help="report folder (default reports/bench-explore-<time>)")
    args = ap.parse_args()
    terminate_as_interrupt()  # SIGTERM stops the episode's pytest and its stack, as Ctrl-C does
    unknown = sorted(set(args.defects) - set(defect_names()))
    if unknown:
        ap.error(f"not pdsim defects: {', '.join(unknown)}")
    out = (args.out or REPO / "reports" / f"bench-explore-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for defect in args.defects or defect_names():
        print(f"{defect}: exploring for {args.budget:g} s", flush=True)
        rows.append(_one(defect, args, out))
        (out / "finds.json").write_text(json.dumps([asdict(r) for r in rows], indent=2))
    table = _markdown(rows, args)
    (out / "finds.md").write_text(table + "\n")
    print(table)
    print(f"report: {out}")
    return 0 if all(r.state != "rig error" for r in rows) else 2


if __name__ == "__main__":
    sys.exit(main())
