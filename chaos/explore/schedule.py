"""A fault schedule as data: the loads an episode sends and the faults it fires, drawn from
a seed over what the target can do. The same seed, episode and capabilities give the same
schedule; the shrinker makes smaller ones of the same types (``chaos.explore.shrink``)."""

from __future__ import annotations

import itertools
import json
import random
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Collection, Iterable, Iterator

from chaos.faults import kinds
from chaos.system.topology import Topology, first_of_kind, link_of
from chaos.targets.base import Capability

__all__ = [
    "FLUSH",
    "LOADS",
    "Load",
    "Schedule",
    "Step",
    "Strike",
    "cuts",
    "generate",
    "primary_path",
    "strikes_for",
]

# What an episode's loads look like; each renders to one workload call (``chaos.explore.render``).
# How often each is drawn: the loads that cross both engines most, the ones the engines serve;
# a request that can never be served, or clients that hang up, less (each shows one thing)
LOAD_WEIGHTS = {"conversation": 3, "streams": 3, "requests": 2, "burst": 2, "impatient": 1, "unservable": 1}
LOADS = tuple(LOAD_WEIGHTS)
HANG_UP_AFTER = 2  # events an impatient client reads before it hangs up
# Faults are dealt from a deck: every fault the target can fire, in an order shuffled from
# the seed, dealt one per struck step across the seed's episodes, then shuffled again. So the
# first round of a seed meets each fault once (a kind of fault weighs as many as it has: a
# link's eight, a stall or crawl each way, on each of four links make the links two thirds of
# the deck), and a short budget (the CI's minutes, the find-rate bench's ten) is not spent on
# repeats while faults go unmet.
# when a fault fires: at once, once an engine holds requests, or once a stream has begun (its
# request can no longer be retried behind the client's back)
TRIGGERS = ("now", "at_prefill", "at_decode", "mid_stream")
STREAMING = ("conversation", "streams", "burst")  # the loads a mid-stream trigger can wait on
# An engine's cache flushed (``/flush_cache``) on a drawn trigger: in one step in FLUSH_RATE of
# those the deck deals no fault to, and drawn from a generator of its own, so a seed's faults
# and loads stay what they were before flushes were drawn.
FLUSH = "flush_cache"
FLUSH_RATE = 0.5
# The faults that can cost decode its prefill by the heartbeat (which asks the bootstrap
# server): a bootstrap link that fails it, a prefill gone or frozen. Half of them are held.
HOLDABLE = {"bootstrap": ("down", "blackhole", "reset_peer"), "prefill": ("kill", "freeze")}


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
    ``amount`` is the toxic's figure where it takes one (ms of latency, KB/s); ``stream``
    the direction a toxic acts on ("upstream": what the link's client sends, decode's
    handshake and bootstrap calls, prefill's KV; "" for a fault that takes none). ``held``:
    the fault outlasts its load until decode's heartbeat gives the prefill up (or its
    detection bound passes), so that what decode does about a lost prefill, and once the
    prefill is back, is tested too (``HOLDABLE``)."""

    action: str
    where: str
    trigger: str = "now"
    amount: int = 0
    stream: str = ""
    held: bool = False

    def describe(self) -> str:
        return (
            f"{self.action} {self.where}"
            + (f" {self.stream}" if self.stream else "")
            + (f" ({self.amount})" if self.amount else "")
            + f" on {self.trigger}"
            + (", held until decode gives prefill up" if self.held else "")
        )


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
    topology: str = "1p1d"  # the stack's engines (chaos.system.topology): strikes may name any

    def as_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Schedule:
        raw: dict[str, Any] = json.loads(text)
        steps = tuple(Step(Load(**s["load"]), Strike(**s["strike"]) if s.get("strike") else None) for s in raw["steps"])
        return cls(raw["seed"], raw["episode"], raw["target"], steps, raw.get("topology", "1p1d"))

    def with_steps(self, steps: Collection[Step]) -> Schedule:
        return replace(self, steps=tuple(steps))

    def size(self) -> tuple[int, int, int, int]:
        """Steps, faults, held faults, then load: what "smaller" means when shrinking."""
        return (
            len(self.steps),
            sum(1 for s in self.steps if s.strike),
            sum(1 for s in self.steps if s.strike and s.strike.held),
            sum(s.load.size() for s in self.steps),
        )

    def name(self) -> str:
        return f"s{self.seed}_e{self.episode}"


def primary_path(strike: Strike) -> bool:
    """Whether the system's primary paths alone answer ``strike``, no timeout or watchdog
    (``chaos.faults.kinds``: an engine's abort of its rooms, a cache flush, a KV link that
    refuses or resets). A cut control or bootstrap link, a link that swallows or crawls, an
    engine or router struck: there a backstop may be the only path."""
    return kinds.primary_path(strike.action, strike.where)


def strikes_for(caps: Collection[Capability], topology: Topology | None = None) -> list[Strike]:
    """Every fault the target can fire (each ``on "now"``), on every engine of ``topology``
    and its links: process faults with process control, a link's faults where the target can
    break that link. A toxic that stalls or slows (blackhole, latency, bandwidth) comes once
    in each direction: a link's two ways fail differently (decode's handshake never reaching
    prefill, or prefill's answer never coming back). Down and reset end the connection
    whichever way: one each. A second engine's links (``bootstrap2``, ``kv2``) are its
    proxies, so only where the target proxies them (pdsim's stacks)."""
    topology = topology or Topology()
    engines = topology.engines
    out: list[Strike] = []
    if Capability.PROCESS_CONTROL in caps:
        for service in (*engines, "router"):
            out += [Strike(action, service) for action in ("kill", "restart", "terminate")]
        out += [Strike("freeze", engine) for engine in engines]
    out += [Strike("abort_all", engine) for engine in engines]
    # a second engine's control and kv links are proxies on pdsim's stacks only (real SGLang's
    # are packet rules on the first pair's ports); its bootstrap link is a proxy on every target
    second = Capability.DEFECTS in caps
    links = {
        "client_router": Capability.PROXIED_CLIENT,
        **{link_of("bootstrap", p): Capability.PROXIED_BOOTSTRAP for p in topology.prefill_names},
        **{link_of("control", p): Capability.CONTROL_LINK for p in topology.prefill_names},
        **{link_of("kv", d): Capability.KV_LINK for d in topology.decode_names},
    }
    for link, needs in links.items():
        if needs not in caps or (link[-1].isdigit() and not link.startswith("bootstrap") and not second):
            continue
        out += [Strike("down", link), Strike("reset_peer", link)]
        stalls = [("blackhole", 0), ("bandwidth", 4)]
        if link == "client_router" or Capability.LINK_DELAY in caps:
            stalls.append(("latency", 300))
        out += [Strike(a, link, amount=n, stream=way) for a, n in stalls for way in ("upstream", "downstream")]
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


def _deck(seed: int, caps: Collection[Capability], topology: Topology) -> Iterator[Strike]:
    """The faults of ``caps`` in rounds, each round every fault once in an order of its own."""
    faults = strikes_for(caps, topology)
    for round_ in itertools.count():
        order = list(faults)
        random.Random(f"pd-chaos explore deck {seed}:{round_}").shuffle(order)
        yield from order


def _steps(rng: random.Random, deck: Iterator[Strike], *, max_steps: int) -> tuple[Step, ...]:
    """One episode's steps: each, three times in four, a fault dealt from ``deck`` on a drawn
    trigger (held or not, where it can be), with a load. Two loads take no card: impatient
    clients are their own fault, and a request the stack can never serve is judged only
    with no fault in its way (turned away at the door), so a card dealt to it is wasted."""
    steps = []
    for _ in range(rng.randint(1, max_steps)):
        struck, trigger = rng.random() < 0.75, rng.choice(TRIGGERS)
        load = _load(rng, held=struck and trigger != "now")
        if trigger == "mid_stream" and load.shape not in STREAMING:
            trigger = "at_decode"
        strike = None
        if struck and load.shape not in ("impatient", "unservable"):
            strike = replace(next(deck), trigger=trigger)
            if strike.action in HOLDABLE.get(first_of_kind(strike.where), ()):
                strike = replace(strike, held=rng.random() < 0.5)
        steps.append(Step(load, strike))
    return tuple(steps)


def _flushes(rng: random.Random, steps: tuple[Step, ...]) -> tuple[Step, ...]:
    """``steps`` with a cache flush in some of those that strike nothing (``FLUSH_RATE``), of
    prefill or decode, on a drawn trigger: while their load runs, an operator's flush. Not
    beside impatient clients or a request never served: those steps judge their own thing."""
    out = []
    for step in steps:
        if step.strike is None and step.load.shape not in ("impatient", "unservable") and rng.random() < FLUSH_RATE:
            trigger = rng.choice(TRIGGERS)
            if trigger == "mid_stream" and step.load.shape not in STREAMING:
                trigger = "at_decode"
            step = replace(step, strike=Strike(FLUSH, rng.choice(("prefill", "decode")), trigger))
        out.append(step)
    return tuple(out)


def generate(
    seed: int,
    episode: int,
    target: str,
    caps: Collection[Capability],
    *,
    max_steps: int = 3,
    topology: Topology | None = None,
) -> Schedule:
    """Episode ``episode`` of ``seed``: one to ``max_steps`` steps (``_steps``), some with a
    cache flush (``_flushes``). Each episode's draws come from its own generators, and its
    faults from the seed's deck where the episodes before it left off (replayed: a few
    hundred draws), so the same seed, episode, capabilities and topology give the same
    schedule, whichever episodes ran before."""
    topology = topology or Topology()
    deck = _deck(seed, caps, topology)
    for e in range(episode + 1):
        steps = _steps(random.Random(f"pd-chaos explore {seed}:{e}"), deck, max_steps=max_steps)
    flushed = _flushes(random.Random(f"pd-chaos explore flush {seed}:{episode}"), steps)
    return Schedule(seed, episode, target, flushed, topology.name)


def cuts(strikes: Iterable[Strike]) -> tuple[str, ...]:
    """Which cuts of the client's hop the strikes make (``chaos.faults.kinds.CUT_OUTCOMES``),
    each once, in the order struck: a strike on the client_router link, smg killed or
    drained, a frozen decode, which holds the streams it serves where nothing can end them."""
    out: list[str] = []
    for s in strikes:
        cut = kinds.cut_of(s.action, s.where)
        if cut and cut not in out:
            out.append(cut)
    return tuple(out)
