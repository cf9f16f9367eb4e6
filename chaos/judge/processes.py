"""What the services' processes did: each kept running as the same process."""

from __future__ import annotations

from chaos.judge.declare import Window, verdict
from chaos.judge.model import Finding, failed, nothing_at_stake, passed, unknown
from chaos.observe.history import History
from chaos.observe.records import Sample
from chaos.observe.sampler import PROCS

__all__ = ["stayed_up"]


def _last_heal(h: History, **_: object) -> float | None:
    """The readings must reach past the last heal: read once a second, a test whose fault
    lasted less than that could end before any reading came (CI at 5293019 on sglang-cpu:
    hostile requests refused within 0.4 s, the reading at +0.74 s judged absent)."""
    return h.last_heal_t()


@verdict(lambda services, **_: f"stayed_up({', '.join(services)})", window=Window(_last_heal, lambda **_: (PROCS,)))
def stayed_up(h: History, services: tuple[str, ...]) -> Finding:
    """Each of ``services`` kept its main process from its first reading to the last: it
    neither crashed nor was restarted (a duplicate bootstrap room crashed both schedulers of
    SGLang 0.5.17, sglang#40125). Read from the process trees' readings
    (``scenario.watch_processes``): a new pid is a restart; a service missing from every
    reading after one went away (one reading missing between two of the same pid is a read
    that failed, not a crash). At stake: the readings taken once the fault began."""
    samples = [s for s in h.of(Sample) if s.source == PROCS]
    fault = h.first_fault_t()
    ref = fault if fault is not None else 0.0
    broke: list[str] = []
    at: list[float] = []
    stake = 0
    for service in services:
        pids = [(s.t, s.values.get(f"pid:{service}")) for s in samples]
        present = [(t, pid) for t, pid in pids if pid is not None]
        if not present:
            return unknown(f"no reading of {service}'s process (scenario.watch_processes)")
        first = present[0][1]
        changed = next(((t, pid) for t, pid in present if pid != first), None)
        if changed is not None:
            broke.append(
                f"{service} restarted {changed[0] - ref:+.2f}s after the fault (pid {first:g} -> {changed[1]:g})"
            )
            at.append(changed[0])
            continue
        last_seen = present[-1][0]
        gone = [t for t, pid in pids if pid is None and t > last_seen]
        if gone:
            broke.append(f"{service} gone {gone[0] - ref:+.2f}s after the fault (last read {last_seen - ref:+.2f}s)")
            at.append(gone[0])
            continue
        stake += sum(1 for t, _ in present if fault is not None and t >= fault)
    if broke:
        return failed("; ".join(broke), at=at, broke=len(broke))
    if not stake:
        return nothing_at_stake("no reading of the processes once the fault began")
    return passed(f"{', '.join(services)} kept their processes over {stake} readings", stake=stake, readings=stake)
