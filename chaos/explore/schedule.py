"""A fault schedule as data: the loads an episode sends and the faults it fires, drawn from
a seed over what the target can do. The same seed, episode and capabilities give the same
schedule; the shrinker makes smaller ones of the same types (``chaos.explore.shrink``)."""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Collection, Iterable

from chaos.targets.base import Capability

__all__ = [
    "FAMILY_WEIGHTS",
    "LOADS",
    "Load",
    "Schedule",
    "Step",
    "Strike",
    "client_hop",
    "family",
    "generate",
    "strikes_for",
]

# What an episode's loads look like; each renders to one workload call (``chaos.explore.render``).
# How often each is drawn: the loads that cross both engines most, the ones the engines serve;
# a request that can never be served, or clients that hang up, less (each shows one thing)
LOAD_WEIGHTS = {"conversation": 3, "streams": 3, "requests": 2, "burst": 2, "impatient": 1, "unservable": 1}
LOADS = tuple(LOAD_WEIGHTS)
HANG_UP_AFTER = 2  # events an impatient client reads before it hangs up
# A fault is drawn by family first, then uniformly within it, so that a family with many
# members (a link's five faults times four links) does not crowd out one with few: PD's own
# windows (the engines' links, the engines themselves) most, the client's hop and aborts less.
FAMILY_WEIGHTS = {"engine link": 4, "engine": 3, "client hop": 2, "abort": 1}
# when a fault fires: at once, once an engine holds requests, or once a stream has begun (its
# request can no longer be retried behind the client's back)
TRIGGERS = ("now", "at_prefill", "at_decode", "mid_stream")
STREAMING = ("conversation", "streams", "burst")  # the loads a mid-stream trigger can wait on


@dataclass(frozen=True)
class Load:
    """One workload: ``count`` agents or requests; ``rounds`` for a conversation."""

    shape: str
    count: int
    rounds: int = 1
    words: int = 30
    max_tokens: int = 8

    def size(self) -> int:
        """How much it sends, the shrinker's measure: requests, then tokens asked for."""
        return self.count * self.rounds * 1000 + self.words + self.max_tokens


@dataclass(frozen=True)
class Strike:
    """One fault: ``action`` on ``where`` (a service or a link), fired on ``trigger``.
    ``amount`` is the toxic's figure where it takes one (ms of latency, KB/s)."""

    action: str
    where: str
    trigger: str = "now"
    amount: int = 0

    def describe(self) -> str:
        return f"{self.action} {self.where}" + (f" ({self.amount})" if self.amount else "") + f" on {self.trigger}"


@dataclass(frozen=True)
class Step:
    """A load sent in the background, and a fault fired while it runs (or none)."""

    load: Load
    strike: Strike | None = None


@dataclass(frozen=True)
class Schedule:
    seed: int
    episode: int
    target: str
    steps: tuple[Step, ...] = field(default_factory=tuple)

    def as_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Schedule:
        raw: dict[str, Any] = json.loads(text)
        steps = tuple(Step(Load(**s["load"]), Strike(**s["strike"]) if s.get("strike") else None) for s in raw["steps"])
        return cls(raw["seed"], raw["episode"], raw["target"], steps)

    def with_steps(self, steps: Collection[Step]) -> Schedule:
        return replace(self, steps=tuple(steps))

    def size(self) -> tuple[int, int, int]:
        """Steps, faults, then load: what "smaller" means when shrinking."""
        return (
            len(self.steps),
            sum(1 for s in self.steps if s.strike),
            sum(s.load.size() for s in self.steps),
        )

    def name(self) -> str:
        return f"s{self.seed}_e{self.episode}"


def family(action: str, where: str) -> str:
    """A fault's family (``FAMILY_WEIGHTS``): what it strikes."""
    if action == "abort_all":
        return "abort"
    if where in ("router", "client_router"):
        return "client hop"
    return "engine" if where in ("prefill", "decode") else "engine link"


def strikes_for(caps: Collection[Capability]) -> list[tuple[str, str, int]]:
    """Every (action, where, amount) the target can fire: process faults with process control,
    a link's faults where the target can break that link."""
    out: list[tuple[str, str, int]] = []
    if Capability.PROCESS_CONTROL in caps:
        for service in ("prefill", "decode", "router"):
            out += [("kill", service, 0), ("restart", service, 0), ("terminate", service, 0)]
        out += [("freeze", "prefill", 0), ("freeze", "decode", 0)]
    out += [("abort_all", "prefill", 0), ("abort_all", "decode", 0)]
    links = {
        "client_router": Capability.PROXIED_CLIENT,
        "bootstrap": Capability.PROXIED_BOOTSTRAP,
        "control": Capability.CONTROL_LINK,
        "kv": Capability.KV_LINK,
    }
    for link, needs in links.items():
        if needs not in caps:
            continue
        out += [("down", link, 0), ("blackhole", link, 0), ("reset_peer", link, 0)]
        if link == "client_router" or Capability.LINK_DELAY in caps:
            out.append(("latency", link, 300))
        out.append(("bandwidth", link, 4))
    return out


def _load(rng: random.Random, *, held: bool) -> Load:
    """A drawn load; ``held`` (a fault waits for an engine to hold it) asks for replies long
    enough for the 10 Hz sampler to see them there."""
    shape = rng.choices(LOADS, weights=[LOAD_WEIGHTS[s] for s in LOADS])[0]
    if shape == "conversation":
        rounds, words = rng.randint(2, 4), rng.choice((30, 120))
        return Load(shape, rng.randint(1, 3), rounds=rounds, words=words, max_tokens=64 if held else 8)
    if shape == "unservable":
        return Load(shape, 1)
    if shape == "impatient":  # streams hung up mid-way: an abort storm when many
        return Load(shape, rng.randint(2, 12), words=rng.choice((10, 200)), max_tokens=200)
    tokens = 200 if held else rng.choice((8, 200))
    return Load(shape, rng.randint(2, 6), words=rng.choice((10, 200)), max_tokens=tokens)


def generate(seed: int, episode: int, target: str, caps: Collection[Capability], *, max_steps: int = 3) -> Schedule:
    """Episode ``episode`` of ``seed``: one to ``max_steps`` steps, each, three times in
    four, a fault the target supports on a drawn trigger, and a load. Impatient clients
    are their own fault: their step fires no other."""
    rng = random.Random(f"pd-chaos explore {seed}:{episode}")
    families: dict[str, list[tuple[str, str, int]]] = {}
    for item in strikes_for(caps):
        families.setdefault(family(item[0], item[1]), []).append(item)
    names = sorted(families)
    steps = []
    for _ in range(rng.randint(1, max_steps)):
        strike = None
        if families and rng.random() < 0.75:
            drawn = rng.choices(names, weights=[FAMILY_WEIGHTS[n] for n in names])[0]
            action, where, amount = rng.choice(families[drawn])
            strike = Strike(action, where, rng.choice(TRIGGERS), amount)
        load = _load(rng, held=strike is not None and strike.trigger != "now")
        if load.shape == "unservable" and strike is not None:  # no engine ever holds it
            strike = replace(strike, trigger="now")
        if strike is not None and strike.trigger == "mid_stream" and load.shape not in STREAMING:
            strike = replace(strike, trigger="at_decode")
        if load.shape == "impatient":
            strike = None
        steps.append(Step(load, strike))
    return Schedule(seed, episode, target, tuple(steps))


def client_hop(strikes: Iterable[Strike]) -> str | None:
    """Which ``chaos.explore.invariants.CUT_BY`` set applies: the first strike on the client's hop (the client_router
    link, or smg itself), or none."""
    for s in strikes:
        if s.where == "client_router":
            return "link"
        if s.where == "router" and s.action in ("kill", "restart"):
            return "router_killed"
        if s.where == "router" and s.action == "terminate":
            return "router_drained"
    return None
