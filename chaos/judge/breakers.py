"""smg's circuit breakers: failures charged only to the engines a fault struck."""

from __future__ import annotations

import itertools

from chaos.judge.declare import verdict
from chaos.judge.model import Finding, failed, nothing_at_stake, passed, unknown
from chaos.observe.history import History
from chaos.observe.pipeline import CIRCUIT_FAILURES
from chaos.observe.records import Sample

__all__ = ["charged_only_where_struck"]


def _charges(h: History, worker: str) -> list[tuple[float, float]]:
    """The failures smg charged to one worker's breaker, sample by sample, read where smg
    lists the worker's breaker outcomes at all. smg creates a worker's ``failure`` series
    at its first failure, so a sample listing the worker's outcomes without it reads 0."""
    listed, failures = CIRCUIT_FAILURES.at(worker), CIRCUIT_FAILURES.at(worker, "failure")
    return [
        (s.t, s.values.get(failures.name, 0.0))
        for s in h.of(Sample)
        if s.source == listed.source and listed.name in s.values
    ]


@verdict(lambda **_: "charged_only_where_struck")
def charged_only_where_struck(h: History, workers: dict[str, str]) -> Finding:
    """smg charges a failure to the breaker of an engine a fault struck (killed, frozen,
    aborted, one end of a broken link), never to one no fault touched: a healthy worker
    charged for another's failure, or for a client's error, has its circuit opened for
    nothing (smg #2565, sglang #31206). ``workers``: engine -> smg's URL for it. A counter
    that falls (smg restarted) counts what it shows after the fall. At stake: the workers no
    fault struck; where every worker was struck (a link between the engines implicates
    both), nothing is."""
    struck = {e for f in h.faults() for e in f.implicates}
    unstruck = [engine for engine in workers if engine not in struck]
    if not unstruck:
        return nothing_at_stake(
            f"every worker was struck ({', '.join(sorted(workers)) or 'none listed'}): none could be charged wrongly",
            struck=sorted(struck),
        )
    totals: dict[str, float] = {}
    moments: dict[str, list[float]] = {}
    for engine, worker in workers.items():
        series = _charges(h, worker)
        if len(series) < 2:
            return unknown(f"smg listed no breaker outcomes of {engine} ({worker}) in two samples")
        charged = [(t, b - a if b >= a else b) for (_, a), (t, b) in itertools.pairwise(series) if b != a]
        totals[engine], moments[engine] = sum(n for _, n in charged), [t for t, _ in charged]
    wrong = next((engine for engine in unstruck if totals[engine]), None)
    if wrong is not None:  # every worker's charges in the evidence: whether the struck one was charged too
        ref = h.first_fault_t() or 0.0
        return failed(
            f"smg charged {totals[wrong]:g} failure(s) to {wrong}'s breaker, which no fault struck, first "
            f"{moments[wrong][0] - ref:+.2f}s after the fault (struck: {', '.join(sorted(struck)) or 'no engine'}; "
            f"charged: {', '.join(f'{e} {n:g}' for e, n in totals.items())})",
            at=moments[wrong],
            charged=totals,
            unstruck=wrong,
            struck=sorted(struck),
        )
    shown = [f"{engine} {totals[engine]:g}{' (struck)' if engine in struck else ''}" for engine in workers]
    return passed("failures charged: " + ", ".join(shown), stake=len(unstruck), charged=totals, struck=sorted(struck))
