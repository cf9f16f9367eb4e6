"""Whether replies are right: each equals the fault-free baseline's reply to its context."""

from __future__ import annotations

from chaos.history import History, Outcome, Phase
from chaos.judge.declare import verdict
from chaos.judge.model import Finding, failed, passed, unknown
from chaos.judge.ops import completed, label

__all__ = ["replies_match_baseline"]


def _divergence(got: str, want: str) -> tuple[int, str]:
    """Where a reply leaves its baseline: the first differing character, with a little of
    each side from there (a reply can be right for pages and wrong after)."""
    at = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    return at, f"differs from char {at} of {len(want)}: got {got[at : at + 40]!r}, baseline {want[at : at + 40]!r}"


@verdict(lambda **_: "replies_match_baseline")
def replies_match_baseline(h: History, *, baseline_phase: Phase = Phase.BASELINE) -> Finding:
    """Every successful reply equals the fault-free baseline's reply to the same context."""
    ops = [o for o in completed(h, None) if o.outcome is Outcome.OK and o.invoke.context]
    base = {o.invoke.context: o.complete.reply for o in ops if o.invoke.phase == baseline_phase}
    pairs = [(o, base[o.invoke.context]) for o in ops if o.invoke.phase != baseline_phase and o.invoke.context in base]
    if not pairs:
        return unknown("no reply shares a context with the baseline")
    wrong = [(o, b, _divergence(o.complete.reply, b)) for o, b in pairs if o.complete.reply != b]
    if wrong:
        ev = "; ".join(f"{label(o)} {said}" for o, _, (_, said) in wrong[:3])
        return failed(
            f"{len(wrong)} of {len(pairs)} replies differ from the baseline: {ev}",
            ops=[o.invoke.op for o, _, _ in wrong],
            wrong=len(wrong),
            of=len(pairs),
            first_difference_at=[at for _, _, (at, _) in wrong[:8]],
        )
    return passed(f"{len(pairs)} replies equal the baseline", of=len(pairs))
