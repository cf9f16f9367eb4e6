"""Whether an explore run judged enough to mean anything (Hypothesis's health checks).

A run whose episodes were mostly inconclusive (a verdict could not say) or rig errors
tested little, however green it looks: it fails and says why. A find that failed once and
then in none of its reruns is flaky, not found: it is reported apart, with its rate, as
Hypothesis reports a failure that does not reproduce."""

from __future__ import annotations

from collections import Counter
from typing import Protocol, Sequence

__all__ = ["UNJUDGED_SHARE", "unhealthy"]

# The share of a run's episodes that may end unjudged (inconclusive, or a rig error) before
# the run as a whole says nothing: one in four
UNJUDGED_SHARE = 0.25
UNJUDGED = ("inconclusive", "rig error")


class _Judged(Protocol):
    state: str


def unhealthy(episodes: Sequence[_Judged], *, share: float = UNJUDGED_SHARE) -> str:
    """Why the run judged too little to pass ("" if it judged enough): no episode ran, or
    more than ``share`` of them ended unjudged."""
    if not episodes:
        return "no episode ran"
    counts = Counter(ep.state for ep in episodes)
    unjudged = sum(counts[s] for s in UNJUDGED)
    if unjudged > share * len(episodes):
        shown = ", ".join(f"{counts[s]} {s}" for s in UNJUDGED if counts[s])
        return (
            f"{unjudged} of {len(episodes)} episodes could not be judged ({shown}), more than "
            f"{share:.0%}: the run tested too little to pass"
        )
    return ""
