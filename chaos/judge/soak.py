"""A soak's quantities keep their floor at its quiet checkpoints."""

from __future__ import annotations

from typing import Sequence

from chaos.growth import Limit, fit
from chaos.history import History
from chaos.judge.declare import verdict
from chaos.judge.model import Finding, failed, passed, unknown

__all__ = ["does_not_grow"]


@verdict(lambda limits, **_: "does_not_grow(" + ", ".join(lim.label for lim in limits) + ")")
def does_not_grow(h: History, limits: Sequence[Limit]) -> Finding:
    """Soak: each quantity, read at the quiet checkpoints after warm-up, keeps its floor:
    the lowest value of the last third exceeds the lowest of the first by no more than its
    limit (KV tokens in use, in-flight counts, a process tree's open files and memory). A
    quantity with too few checkpoint values is unknown; every fitted slope is shown, per hour."""
    grown, missing, shown = [], [], []
    figures: dict[str, dict[str, float]] = {}
    for lim in limits:
        f = fit(h, lim.metric)
        if f is None:
            missing.append(lim.label)
            continue
        allowed = lim.allowed(f)
        figures[lim.label] = {
            "slope_per_h": f.slope_per_s * 3600,
            "growth": f.growth,
            "allowed": allowed,
            "window_s": f.window_s,
        }
        line = (
            f"{lim.label} {lim.show(f.slope_per_s * 3600)}/h (floor {lim.show(f.growth)} over {f.window_s:.0f}s, "
            f"at most {lim.show(allowed, sign=False)})"
        )
        shown.append(line)
        if f.growth > allowed:
            grown.append(line)
    if grown:
        return failed(f"grew past its limit: {'; '.join(grown)}", quantities=figures)
    if missing:
        return unknown(
            f"fewer than 3 checkpoint values of {', '.join(missing)}; {'; '.join(shown)}",
            quantities=figures,
            missing=missing,
        )
    return passed("; ".join(shown), quantities=figures)
