"""What an explore run leaves to read: ``explore.json`` (every episode and find, as data) and
``explore.md`` (the counts, the health check, the finds and the flaky ones apart)."""

from __future__ import annotations

import json
import os
from typing import Any

from chaos.explore.episode import Episode, Find
from chaos.explore.explorer import Explorer
from chaos.explore.health import unhealthy

__all__ = ["write_summary"]


def write_summary(explorer: Explorer, episodes: list[Episode], finds: list[Find]) -> None:
    counts: dict[str, int] = {}
    for ep in episodes:
        counts[ep.state] = counts.get(ep.state, 0) + 1
    data: dict[str, Any] = {
        "target": explorer.target,
        "seed": explorer.seed,
        "defects": explorer.env.get("PDSIM_DEFECTS", ""),
        "episodes": [
            {
                "episode": ep.schedule.episode,
                "state": ep.state,
                "seconds": ep.seconds,
                "why": ep.why,
                "file": str(ep.file),
                "schedule": json.loads(ep.schedule.as_json()),
                "known": [{"verdict": v.kind, "component": k.component, "shown_by": k.shown_by} for v, k in ep.known],
            }
            for ep in episodes
        ],
        "finds": [
            {
                "invariant": str(f.signature),
                "kind": f.signature.kind,
                "episode": f.episode.schedule.episode,
                "after_s": f.after_s,
                "reproducer": str(f.reproducer),
                "steps": [len(f.episode.schedule.steps), len(f.shrunk.steps)],
                "shrink_candidates": f.candidates,
                "reproduced": f"{f.reproduced}/{f.reruns}",
                "flaky": f.flaky,
            }
            for f in finds
        ],
        "counts": counts,
        "unhealthy": unhealthy(episodes),
    }
    (explorer.out / "explore.json").write_text(json.dumps(data, indent=2))
    lines = [
        f"# explore: target {explorer.target}, seed {explorer.seed}",
        "",
        f"{len(episodes)} episodes: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())),
        "",
    ]
    if why := unhealthy(episodes):
        lines += [f"**Unhealthy run**: {why}.", ""]
    for title, shown in (
        ("Found", [f for f in finds if not f.flaky]),
        ("Flaky (no rerun failed)", [f for f in finds if f.flaky]),
    ):
        if not shown:
            continue
        lines += [f"## {title}", "", "| invariant | episode | steps (drawn → shrunk) | reproduced | reproducer |"]
        lines += ["|---|---|---|---|---|"]
        lines += [
            f"| {f.signature} | {f.episode.schedule.episode} | {len(f.episode.schedule.steps)} → {len(f.shrunk.steps)} "
            f"| {f.reproduced}/{f.reruns} | [{f.reproducer.name}]({os.path.relpath(f.reproducer, explorer.out)}) |"
            for f in shown
        ]
        lines.append("")
    if not finds:
        lines.append("No invariant failed that a known issue does not explain.")
    (explorer.out / "explore.md").write_text("\n".join(lines) + "\n")
