"""Per-hop statistics of a sampled window, and the diagnosis they support.

A hop is a queue a request waits in on its way through the stack. Over the window each
hop's gauge gets min/max/last and one of three shapes: ``idle`` (0 throughout), ``rotating``
(non-zero at times, back to 0 at least once), ``pinned`` (never 0). A pinned hop is
``stuck`` when its progress counters (tokens, finished or failed requests) stayed flat,
and ``slow`` when they moved: a queue that never empties but keeps draining is load, not a
hang. This is the incident's lesson: a gauge read every 3 to 5 s made rotating load look
pinned, so ``coarse_pinned_share`` says how often a 3 s sampler would have read the same
hop as non-zero at every sample.

Pure functions over samples: tested with crafted series, used live by ``doctor.run``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from chaos.observe.pipeline import BEFORE_ROUTER, PIPELINE, Hop
from chaos.observe.pipeline import HOPS as PIPELINE_ORDER  # log-only hops included
from chaos.system.topology import first_of_kind

__all__ = ["BEFORE_ROUTER", "HOPS", "Diagnosis", "Hop", "HopStats", "diagnose", "hop_stats"]

Series = list[tuple[float, float]]


HOPS = tuple(h for h in PIPELINE if h.gauge is not None)  # the hops a gauge counts
ENGINE_HOPS = tuple(h.name for h in HOPS if h.service != "router")
NO_PROBLEM = "no problem found"
COARSE_PERIOD_S = 3.0


@dataclass
class HopStats:
    hop: str
    source: str
    samples: int
    min: float | None = None
    max: float | None = None
    last: float | None = None
    shape: str = "unknown"  # idle | rotating | pinned | unknown (no samples)
    progress: float = 0.0  # how much its progress counters rose in the window
    verdict: str = "unknown"  # idle | flowing | slow | stuck | unknown
    coarse_pinned_share: float | None = None  # share of 3 s sampler phases that read non-zero at every sample
    series: Series = field(default_factory=list, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "series"}


def _rise(series: Series) -> float:
    return max(0.0, series[-1][1] - series[0][1]) if len(series) >= 2 else 0.0


def coarse_pinned_share(series: Series, period_s: float = COARSE_PERIOD_S, step_s: float = 0.05) -> float | None:
    """Over every phase of a sampler reading the gauge every ``period_s`` (at ``step_s``
    offsets), the share whose every reading was non-zero: how likely a slow sampler was to
    report this hop as pinned. None when the window holds fewer than two such readings."""
    if not series or series[-1][0] - series[0][0] < period_s:
        return None
    t0, t_end = series[0][0], series[-1][0]
    phases = [t0 + i * step_s for i in range(int(period_s / step_s))]
    pinned = 0
    for phase in phases:
        reads, t, j = [], phase, 0
        while t <= t_end:
            while j + 1 < len(series) and series[j + 1][0] <= t:
                j += 1
            reads.append(series[j][1])
            t += period_s
        pinned += all(v > 0 for v in reads)
    return pinned / len(phases)


def hop_stats(hop: Hop, gauge: Series, counters: dict[str, Series]) -> HopStats:
    st = HopStats(hop.name, hop.service, len(gauge), series=gauge)
    if not gauge:
        return st
    values = [v for _, v in gauge]
    st.min, st.max, st.last = min(values), max(values), values[-1]
    st.shape = "idle" if st.max == 0 else ("rotating" if st.min == 0 else "pinned")
    st.progress = sum(_rise(counters.get(c, [])) for c in hop.progress)
    if st.shape == "idle":
        st.verdict = "idle"
    elif st.shape == "rotating":
        st.verdict = "flowing"
    else:
        st.verdict = "slow" if st.progress > 0 else "stuck"
    st.coarse_pinned_share = coarse_pinned_share(gauge)
    return st


@dataclass
class Diagnosis:
    location: str
    state: str  # stuck | not answering | failing | ok
    evidence: list[str]

    @property
    def ok(self) -> bool:
        return self.location == NO_PROBLEM

    def line(self) -> str:
        head = self.location if self.ok else f"{self.location}: {self.state}"
        return f"diagnosis: {head} ({'; '.join(self.evidence)})"


def _pipeline_order(hop: str) -> int:
    """A hop's place in the PD pipeline, for the gauge hops and the log-only ones alike."""
    return PIPELINE_ORDER.index(hop) if hop in PIPELINE_ORDER else len(PIPELINE_ORDER)


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:g}"


def diagnose(
    stats: list[HopStats],
    *,
    unreachable: dict[str, str],
    probes: dict[str, dict[str, Any]],
    open_requests: dict[str, list[str]],
) -> Diagnosis:
    """The most likely location of a stuck request, in this order of evidence: a service that
    does not answer; a hop pinned with flat progress (the earliest one in the pipeline); the
    router holding requests while every engine hop is idle; a failing probe through the
    client's path while the router's own succeeds; otherwise no problem."""
    by = {s.hop: s for s in stats}
    holding = [f"{s.hop} max {_fmt(s.max)} last {_fmt(s.last)} ({s.shape})" for s in stats if s.max]
    engines_idle = all(not by[h].max for h in ENGINE_HOPS if h in by) and not any(s != "router" for s in unreachable)

    # decodes, then prefills, then the router: every engine of a topology (decode2 among them)
    order = sorted(unreachable, key=lambda s: (("decode", "prefill", "router").index(first_of_kind(s)), s))
    for service in order:
        if service in unreachable:
            # the hop its open requests sit in, from its last answered samples or its log
            hops = [s.hop for s in stats if s.source == service and s.max] + [
                h for h in open_requests if h.startswith(service)
            ]
            where = min(hops, key=_pipeline_order) if hops else service
            ev = [f"{service} did not answer /metrics: {unreachable[service]}", *holding]
            n_open = sum(len(ids) for hop, ids in open_requests.items() if hop.startswith(service))
            if n_open:
                ev.append(f"{n_open} requests started and not finished in {service}'s log")
            return Diagnosis(where, "stuck (not answering: frozen or wedged)", ev)

    stuck = [s for s in stats if s.verdict == "stuck" and s.source != "router"]
    if stuck:
        s = stuck[0]
        return Diagnosis(
            s.hop,
            "stuck",
            [f"{s.hop} held {_fmt(s.min)}-{_fmt(s.max)} for the whole window while its progress counters stayed flat"]
            + [h for h in holding if not h.startswith(s.hop)],
        )

    router = by.get("router", HopStats("router", "router", 0))
    if engines_idle and router.max:
        state = "stuck" if router.verdict == "stuck" else "holding"
        return Diagnosis(
            "router",
            state,
            [
                f"router in-flight max {_fmt(router.max)} last {_fmt(router.last)} ({router.shape}) while every engine hop stayed at 0"
            ],
        )

    client_probe, router_probe = probes.get("client"), probes.get("router")
    if client_probe and not client_probe["ok"] and engines_idle and not router.max:
        ev = [
            f"a probe through the client's path failed ({client_probe['outcome']} after {client_probe['seconds']:.2f}s)"
        ]
        if router_probe:
            ev.append(
                f"a probe straight to the router {'succeeded' if router_probe['ok'] else 'failed too'} in {router_probe['seconds']:.2f}s"
            )
        ev.append("router and engines idle")
        if router_probe and not router_probe["ok"]:
            return Diagnosis("router", "failing", ev)
        return Diagnosis(BEFORE_ROUTER, "stuck", ev)
    if router_probe and not router_probe["ok"]:
        return Diagnosis(
            "router",
            "failing",
            [
                f"a fresh request straight to the router failed: {router_probe['outcome']} {router_probe.get('error', '')[:120]}",
                *holding,
            ],
        )

    ev = [
        f"{s.hop} {s.verdict}: {_fmt(s.min)}-{_fmt(s.max)}, back to 0"
        if s.shape == "rotating"
        else f"{s.hop} {s.verdict} at {_fmt(s.min)}-{_fmt(s.max)}"
        for s in stats
        if s.max
    ]
    ev = ev or ["every hop idle"]
    ok_probes = [f"probe via {k} ok in {p['seconds']:.2f}s" for k, p in probes.items() if p["ok"]]
    return Diagnosis(NO_PROBLEM, "ok", ev + ok_probes)
