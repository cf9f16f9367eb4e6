"""Recovery: a request after the heal (after each heal, where faults follow one another)
succeeds within the target's bound."""

from __future__ import annotations

from typing import Any, Collection

from chaos.judge.declare import verdict
from chaos.judge.model import Finding, failed, passed, unknown
from chaos.judge.ops import completed
from chaos.observe.history import History
from chaos.observe.records import FaultEvent, Outcome, Stage
from chaos.observe.sampler import HEALTH

__all__ = ["recovers", "recovers_after_each_heal"]


def _label(within_s: float, ready: Collection[str], **_: object) -> str:
    shown = f" of {', '.join(ready)} ready" if ready else ""
    return f"recovers(within={within_s:g}s{shown})"


@verdict(_label)
def recovers(h: History, *, within_s: float, ready: Collection[str] = ()) -> Finding:
    """A request invoked after the last heal succeeds, completing within ``within_s`` of it;
    with ``ready`` (services whose /health is watched: ``scenario.watch_health``), within
    ``within_s`` of the first probe after the heal at which the last of them answered 200.
    That is for an engine the scenario held (frozen) for as long as another one took to
    restart: back, it first works off what queued for it meanwhile (SGLang's /health
    generates a token behind all of it: 8.7 s after an 81 s freeze on a slow 2-core machine),
    work that grows with the hold. How long it took is shown, not judged; the router's part
    (its health checks, its breakers) is what ``within_s`` bounds. A service watched that
    never answered 200 after the heal leaves the clock at the heal."""
    heal = h.last_heal_t()
    if heal is None:
        return unknown("no heal in the history")
    said = {s: h.series(HEALTH, s) for s in ready}
    unwatched = [s for s, answers in said.items() if not answers]
    if unwatched:
        return unknown(f"no answer from {', '.join(unwatched)}'s /health was sampled (scenario.watch_health)")
    up = {s: next((t for t, val in answers if t >= heal and val == 1.0), None) for s, answers in said.items()}
    never = [s for s, t in up.items() if t is None]
    begun, since = heal, "the heal"
    if never:
        since = f"the heal ({', '.join(never)} never answered 200 after it)"
    elif up:
        begun = max(t for t in up.values() if t is not None)
        since = f"{', '.join(ready)} answered 200 again ({begun - heal:.2f}s after the heal)"
    after = [o for o in completed(h, None) if o.invoke.t >= heal]
    ok = [o for o in after if o.outcome is Outcome.OK]
    if not after:
        return unknown("no request was sent after the heal")
    figures = {"bound_s": within_s, "ready_after_heal_s": round(begun - heal, 3), "never_ready": never}
    if ok and ok[0].complete.t - begun <= within_s:
        took = ok[0].complete.t - begun
        return passed(
            f"first success {took:.2f}s after {since}",
            stake=len(after),
            ops=[ok[0].invoke.op],
            at=[heal, begun],
            recovered_s=round(took, 3),
            **figures,
        )
    outcomes = ", ".join(f"{o.outcome.value}@+{o.complete.t - begun:.1f}s" for o in after[:6])
    return failed(
        f"no success within {within_s:g}s of {since}; after it: {outcomes}",
        ops=[o.invoke.op for o in after],
        at=[heal, begun],
        outcomes=[o.outcome.value for o in after[:8]],
        **figures,
    )


@verdict(lambda within_s, **_: f"recovers_after_each_heal(within={within_s:g}s)")
def recovers_after_each_heal(h: History, *, within_s: float) -> Finding:
    """Where faults follow one another (an explore episode's steps), service comes back
    after each one, not only after the last: a request invoked after a heal and before the
    next fault is injected succeeds within ``within_s`` of that heal. A heal with no request
    before the next fault says nothing of its recovery: unknown, never a pass."""
    events = sorted((f for f in h.of(FaultEvent) if f.stage in (Stage.INJECT, Stage.HEALED)), key=lambda f: f.t)
    heals = [f.t for f in events if f.stage is Stage.HEALED]
    if not heals:
        return unknown("no heal in the history")
    ops = completed(h, None)
    slow: list[str] = []
    silent: list[float] = []
    took: list[float] = []
    for heal in heals:
        ends = min((f.t for f in events if f.stage is Stage.INJECT and f.t > heal), default=float("inf"))
        after = [o for o in ops if heal <= o.invoke.t < ends]
        ok = [o for o in after if o.outcome is Outcome.OK]
        if not after:
            silent.append(heal)
        elif ok and ok[0].complete.t - heal <= within_s:
            took.append(round(ok[0].complete.t - heal, 3))
        else:
            outcomes = ", ".join(f"{o.outcome.value}@+{o.complete.t - heal:.1f}s" for o in after[:6])
            slow.append(f"heal at {heal:.2f}s: {outcomes}")
    figures: dict[str, Any] = {"bound_s": within_s, "heals": len(heals), "recovered_s": took}
    if slow:
        return failed(
            f"no success within {within_s:g}s of {len(slow)} heal(s): " + "; ".join(slow), at=heals, **figures
        )
    if silent:
        return unknown(f"no request between {len(silent)} heal(s) and the next fault", at=silent, **figures)
    return passed(
        f"each of {len(heals)} heals: first success within {max(took):.2f}s", stake=len(heals), at=heals, **figures
    )
