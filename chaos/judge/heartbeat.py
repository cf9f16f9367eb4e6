"""Decode's heartbeat: a prefill decode can no longer reach is given up within the
heartbeat's bound (``Bounds.heartbeat_detect_s``), so that the rooms waiting on it fail
instead of waiting for their own timeouts, and decode bootstraps afresh once prefill is back.

A held fault (``chaos.explore``: prefill killed or frozen, the bootstrap link cut) is healed
as soon as decode logs that it gave the prefill up (``PREFILL_LOST``), or once the bound and
the slack have passed; the fault runner records the first as a fired trigger. A hold that ran
out is a heartbeat that did not fire in time.
"""

from __future__ import annotations

from chaos.judge.declare import verdict
from chaos.judge.model import Finding, failed, nothing_at_stake, passed
from chaos.observe.history import History
from chaos.observe.pipeline import PREFILL_LOST
from chaos.observe.records import HEAL_ONCE, FaultEvent, Stage, TriggerFired

__all__ = ["decode_gives_prefill_up"]


def _label(held: int, no_sooner_s: float = 0.0, **_: object) -> str:
    return f"decode_gives_prefill_up({held} held" + (f", no sooner than {no_sooner_s:g}s)" if no_sooner_s else ")")


@verdict(_label)
def decode_gives_prefill_up(h: History, *, held: int, no_sooner_s: float = 0.0) -> Finding:
    """Each of the ``held`` faults that cut decode from its prefill ended because decode gave
    the prefill up (its heartbeat's line), not because the hold ran out, and no sooner than
    ``no_sooner_s`` after the fault began (``Bounds.heartbeat_no_sooner_s``): a heartbeat
    that gives up on fewer misses than it is set to fails healthy prefills on one slow
    answer. The rig sees the line when it polls: late, never early."""
    if held <= 0:
        return nothing_at_stake("no fault was held until decode gave its prefill up")
    given_up = [t for t in h.of(TriggerFired) if t.trigger.startswith(HEAL_ONCE) and PREFILL_LOST in t.trigger]
    injected = [f.t for f in h.of(FaultEvent) if f.stage is Stage.INJECT]
    after = [
        round(t.t - max((i for i in injected if i <= t.t), default=t.t), 3) for t in given_up
    ]  # from the fault each give-up ended
    early = [s for s in after if s < no_sooner_s]
    if early:
        return failed(
            f"decode gave prefill up {min(early):.2f}s after the fault, sooner than {no_sooner_s:g}s: "
            "fewer missed heartbeats than it is set to",
            at=[t.t for t in given_up],
            given_up_s=after,
            no_sooner_s=no_sooner_s,
        )
    if len(given_up) >= held:
        return passed(
            f"decode gave prefill up in each of {held} held faults, "
            f"{', '.join(f'{s:.2f}s' for s in after)} after the fault",
            stake=held,
            at=[t.t for t in given_up],
            given_up_s=after,
            no_sooner_s=no_sooner_s,
        )
    return failed(
        f"{held - len(given_up)} of {held} held faults ran out their hold: decode never logged {PREFILL_LOST!r}",
        at=[t.t for t in given_up],
        held=held,
        given_up=len(given_up),
    )
