"""Soak: a long run of mixed multi-round traffic with faults at seeded random moments;
nothing may grow.

Opt-in: it skips unless ``--soak DURATION`` is given (``pytest suites --soak 30m -k soak``;
the kill matrix runs it for 40 s). Bug class: slow leaks no single scenario shows, because
each costs one descriptor, a few KV tokens or a little memory per request or per fault
(fd exhaustion from cached PD sockets, #31766; Dynamo's 5-hour endurance run counts only
requests). Fault model: cycle after cycle, conversations of two to four rounds, short and
long, each cycle with one fault from the menu the target supports (none, a slowed KV or
bootstrap link, decode aborting everything), fired once a seeded random number of the
cycle's requests are done; then the system goes quiet and a checkpoint reads every
quantity. Verdicts: after warm-up, decode's KV tokens in use, smg's in-flight gauges and
each process tree's open files and memory fit lines whose growth stays within their
limits; every failure is clean. The slopes per hour are printed, and drawn in soak.png.
"""

from __future__ import annotations

import contextlib
import random
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import pytest

from chaos import verdicts as v
from chaos.judge.declare import verdict
from chaos.judge.model import Finding, failed, passed, unknown
from chaos.observe.growth import Limit, fit
from chaos.observe.history import History
from chaos.observe.pipeline import ENGINE_QUEUES, ROUTER_INFLIGHT, Metric
from chaos.observe.records import Outcome, Phase
from chaos.observe.triggers import requests_done
from chaos.targets.base import Capability

pytestmark = [pytest.mark.fault("load")]

AGENTS = 3
MIB = 1 << 20
SERVICES = ("prefill", "decode", "router")
# Decode's radix cache is off in PD (SGLang 0.5.23), so its tokens at quiet are the leak;
# prefill's radix cache keeps prompts by design, so its tokens are not a leak signal.
LIMITS = [
    Limit(Metric("decode", "num_used_tokens"), 0, unit=" tokens"),
    *(Limit(m, 0) for m in ROUTER_INFLIGHT),
    *(Limit(Metric("procs", f"open_fds:{s}"), 8, unit=" fds") for s in SERVICES),
    *(Limit(Metric("procs", f"rss_bytes:{s}"), 32, relative=0.05, unit=" MiB", scale=MIB) for s in SERVICES),
]


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
    return passed("; ".join(shown) or "no quantity to judge", stake=len(figures), quantities=figures)


@dataclass(frozen=True)
class Menu:
    """One fault a cycle may draw, and what the target needs for it."""

    name: str
    needs: Capability | None
    fault: Callable[..., contextlib.AbstractContextManager[Any]]  # (faults, when=) -> the fault's block


MENU = (
    Menu("none", None, lambda faults, **kw: contextlib.nullcontext()),
    Menu("kv link slowed", Capability.LINK_DELAY, lambda faults, **kw: faults.latency("kv", 150, **kw)),
    Menu(
        "bootstrap link slowed",
        Capability.PROXIED_BOOTSTRAP,
        lambda faults, **kw: faults.latency("bootstrap", 200, stream="upstream", **kw),
    ),
    Menu("decode aborts everything", None, lambda faults, **kw: faults.abort_all("decode", **kw)),
)


def test_soak(scenario, workload, faults, history, bounds, soak, seed):
    rng = random.Random(seed)
    menu = [m for m in MENU if m.needs is None or scenario.has(m.needs)]
    scenario.watch_processes(*SERVICES)
    scenario.judge(does_not_grow(LIMITS), v.failed_requests_are_clean())
    for _ in soak.cycles():
        pick = rng.choice(menu)
        rounds = rng.randint(2, 4)
        convo = workload.conversations(agents=AGENTS, rounds=rounds, words_per_round=rng.choice((30, 300))).start()
        done = sum(1 for o in history.ops(phase=Phase.FAULT) if o.outcome is Outcome.OK)
        # a seeded random moment within the cycle's first round: once that many more requests succeeded
        with pick.fault(faults, when=requests_done(history, done + rng.randrange(AGENTS), phase=Phase.FAULT)):
            convo.join()
        scenario.checkpoint(ENGINE_QUEUES + ROUTER_INFLIGHT, within_s=bounds.quiet_s)
    scenario.report_growth(LIMITS)
