"""Workload shapes over the rig's client (``chaos.clients.client``): one-shot requests, multi-round
conversations, abort storms, recovery probes, and any of them in the background while a
fault happens.

A conversation is what an agent harness does: each agent holds one keep-alive connection
and, each round, sends the whole conversation so far plus new text.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Callable, Iterator, Mapping

from tenacity import RetryError, Retrying, retry_if_result, stop_after_attempt, stop_after_delay, wait_fixed

from chaos.clients.client import Client, Deadlines, HangUp
from chaos.clients.unfinished import send_unfinished
from chaos.observe.history import History
from chaos.observe.records import Complete, Outcome, Phase
from chaos.system.limits import waiting

__all__ = ["OVER_ANY_CONTEXT", "Background", "Conversation", "InFlight", "Workload", "stop_string_in"]

# words of "word ": a prompt above the context of every model the targets serve (pdsim's 32,768
# tokens, the tiny model's 16,384, the GPU models' 32k at most), which every engine must refuse
# as the client's error
OVER_ANY_CONTEXT = 70_000

WORDS = [
    "river",
    "stone",
    "lantern",
    "orchard",
    "meadow",
    "signal",
    "harbor",
    "copper",
    "thread",
    "canyon",
    "beacon",
    "ember",
    "glacier",
]


def stop_string_in(reply: str, *, after: int, length: int) -> str | None:
    """``length`` characters of ``reply`` from ``after`` on, no space at either end, that
    appear nowhere before: asked again as a stop string, the reply must be cut right there.
    Read off a greedy reply, such a stop condition holds on any model (None: the reply has
    none past ``after``)."""
    for i in range(after, len(reply) - length + 1):
        stop = reply[i : i + length]
        if stop == stop.strip() and reply.find(stop) == i:
            return stop
    return None


class Background:
    """Daemon threads, one per named job: an interrupted run never waits for its agents
    at exit (ThreadPoolExecutor's workers would hold the interpreter open)."""

    def __init__(self, jobs: Mapping[str, Callable[[], Any]]) -> None:
        self._results: dict[str, Any] = {}
        self._errors: dict[str, BaseException] = {}
        self._threads = [
            threading.Thread(target=self._run, args=(name, fn), name=name, daemon=True) for name, fn in jobs.items()
        ]
        for t in self._threads:
            t.start()

    def _run(self, name: str, fn: Callable[[], Any]) -> None:
        try:
            self._results[name] = fn()
        except BaseException as exc:  # handed to join(), which re-raises it
            self._errors[name] = exc

    def join(self, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        with waiting(
            f"{len(self._threads)} background job(s) to finish ({self._threads[0].name if self._threads else ''}...)",
            timeout_s,
        ):
            for t in self._threads:
                t.join(max(0.0, deadline - time.monotonic()))
        late = [t.name for t in self._threads if t.is_alive()]
        if late:
            raise TimeoutError(f"{', '.join(late)} still running after {timeout_s:g}s")
        if self._errors:
            raise next(iter(self._errors.values()))
        return {t.name: self._results[t.name] for t in self._threads}


@dataclass
class InFlight:
    """Requests sent in the background; ``join`` returns their endings in sending order."""

    runner: Background
    bound_s: float
    name: str = ""  # the workload's id in the history ("background#2"): what a verdict scopes by

    @classmethod
    def start(
        cls,
        sends: list[Callable[[], Complete]],
        deadlines: Deadlines,
        *,
        interval_s: float = 0.0,
        name: str = "",
        stop: threading.Event | None = None,
    ) -> "InFlight":
        """Each send on its own thread, at once or, open loop, ``interval_s`` after the one
        before (arrivals on a schedule, whatever the replies do: load that keeps coming);
        ``join`` is bounded by their deadlines and the schedule. Once ``stop`` is set, the
        sends still to come are not made: arrivals until what they probe for is over."""
        halt = stop or threading.Event()

        def at(delay_s: float, send: Callable[[], Complete]) -> Complete | None:
            # the send's slot in the schedule, not a wait for a condition
            return None if halt.wait(delay_s) else send()

        jobs = {str(i): partial(at, i * interval_s, send) for i, send in enumerate(sends)}
        return cls(Background(jobs), deadlines.ends_within_s + len(sends) * interval_s + 1, name)

    def join(self) -> list[Complete]:
        """The endings of the requests sent, in sending order (a stopped schedule's unsent
        ones left out)."""
        done = self.runner.join(self.bound_s)
        return [c for i in range(len(done)) if (c := done[str(i)]) is not None]


@dataclass
class Conversation:
    """``agents`` agents in parallel, ``rounds`` rounds each, growing context, keep-alive."""

    workload: "Workload"
    agents: int
    rounds: int
    deadlines: Deadlines
    stream: bool = True
    max_tokens: int = 8
    words_per_round: int = 60
    retries: int = 0
    retry_wait_s: float = 0.5
    retry_on: frozenset[Outcome] = frozenset({Outcome.CLEAN_ERROR})
    phase: Phase = Phase.DERIVED
    name: str = ""  # the workload's id in the history ("conversations#1"), given by ``Workload``
    # called with the round's number before each round's request (in the agent's thread):
    # what must happen between two rounds, e.g. an engine's cache flushed or restarted
    before_each: Callable[[int], None] | None = None
    replies: dict[str, list[Complete]] = field(default_factory=dict)

    def start(self) -> "Conversation":
        """Start every agent in the background; ``join`` waits for them."""
        self._runner = Background({f"agent{i}": partial(self._agent, f"agent{i}") for i in range(self.agents)})
        return self

    def join(self) -> dict[str, list[Complete]]:
        """Wait for every agent; bounded, since each request is bounded by its deadlines."""
        self.replies = self._runner.join(self.rounds * self._round_s + 5)
        return self.replies

    @property
    def _round_s(self) -> float:
        """The longest one round of one agent may take: each attempt to its deadline."""
        return (self.retries + 1) * (self.deadlines.ends_within_s + self.retry_wait_s)

    def _opening(self, name: str) -> tuple[Client, random.Random, list[dict[str, str]]]:
        """Agent ``name``'s keep-alive client, its seeded words and its conversation so far."""
        client = Client(self.workload.base_url, self.workload.history, self.deadlines)
        return (
            client,
            random.Random(f"{self.workload.seed}:{name}"),
            [{"role": "system", "content": f"You are {name}."}],
        )

    def run(self) -> dict[str, list[Complete]]:
        return self.start().join()

    def _agent(self, name: str) -> list[Complete]:
        client, rng, messages = self._opening(name)
        out: list[Complete] = []
        try:
            for rnd in range(self.rounds):
                if self.before_each is not None:
                    self.before_each(rnd)
                reply = self._turn(client, rng, messages, rnd, name=name)
                out.append(reply)
                if not reply.ok:
                    break  # the harness gives up this conversation
        finally:
            client.close()
        return out

    def _turn(
        self, client: Client, rng: random.Random, messages: list[dict[str, str]], rnd: int, *, name: str
    ) -> Complete:
        """One round of agent ``name``: new text on the conversation so far, sent (retried on
        ``retry_on``); the reply joins ``messages`` where it succeeded."""
        text = " ".join(rng.choice(WORDS) for _ in range(self.words_per_round))
        messages.append({"role": "user", "content": f"round {rnd}: {text}"})
        body = self.workload.chat(messages, max_tokens=self.max_tokens, ignore_eos=True, stream=self.stream)
        if self.stream:
            body["stream_options"] = {"include_usage": True}
        retry = Retrying(
            stop=stop_after_attempt(self.retries + 1),
            wait=wait_fixed(self.retry_wait_s),
            retry=retry_if_result(lambda r: r.outcome in self.retry_on),
        )
        try:
            reply: Complete = retry(
                client.request,
                "/v1/chat/completions",
                body,
                agent=name,
                round=rnd,
                phase=self.phase,
                workload=self.name,
            )
        except RetryError as gave_up:  # retries only on `retry_on` (clean errors by default)
            reply = gave_up.last_attempt.result()
        if reply.ok:
            messages.append({"role": "assistant", "content": reply.reply})
        return reply

    def run_in_step(self, between: Callable[[int], None]) -> dict[str, list[Complete]]:
        """The rounds as bursts: every agent's round ``r`` sent at once, once ``between(r)``
        has returned (in the caller's thread: an idle held, say) and every agent's round
        ``r - 1`` has ended; each agent on its own keep-alive connection. An agent whose
        round failed gives its conversation up, as ``run``'s do."""
        agents = {f"agent{i}": self._opening(f"agent{i}") for i in range(self.agents)}
        self.replies = {n: [] for n in agents}
        live = list(agents)
        try:
            for rnd in range(self.rounds):
                if not live:
                    break
                between(rnd)
                burst = Background({n: partial(self._turn, *agents[n], rnd, name=n) for n in live})
                for n, reply in burst.join(self._round_s + 5).items():
                    self.replies[n].append(reply)
                    if not reply.ok:
                        live.remove(n)
        finally:
            for client, _, _ in agents.values():
                client.close()
        return self.replies


@dataclass
class Workload:
    """The ``workload`` fixture: requests and conversations against the target's client URL.
    Each call is one workload with its own id in the history; an unstated phase is the
    workload's, derived from the fault events (``chaos.observe.phases``)."""

    base_url: str
    history: History
    seed: int
    model: str
    deadlines: Deadlines = field(default_factory=Deadlines)
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1), init=False, repr=False)

    def _name(self, shape: str) -> str:
        return f"{shape}#{next(self._ids)}"

    def at(self, base_url: str) -> "Workload":
        """This workload's requests sent to another URL (an engine's own, where a deployment
        lets clients reach it), into the same history and numbered with this one's."""
        other = replace(self, base_url=base_url)
        other._ids = self._ids
        return other

    def conversations(self, *, agents: int, rounds: int, deadlines: Deadlines | None = None, **kw: Any) -> Conversation:
        return Conversation(self, agents, rounds, deadlines or self.deadlines, name=self._name("conversations"), **kw)

    def chat(self, messages: str | list[dict[str, str]], *, max_tokens: int, **extra: Any) -> dict[str, Any]:
        """A chat-completions body for the target's model, decoded greedily (temperature 0):
        a reply is then a function of its context on a real engine too, so it can be held
        against a baseline. ``messages`` may be one user message's text."""
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        return {"model": self.model, "messages": list(messages), "max_tokens": max_tokens, "temperature": 0, **extra}

    def request(
        self,
        path: str,
        body: dict[str, Any],
        *,
        phase: Phase = Phase.DERIVED,
        deadlines: Deadlines | None = None,
        hang_up_after: HangUp | None = None,
        workload: str = "",
        invalid: str = "",
        content: bytes | None = None,
    ) -> Complete:
        """One request on a fresh connection (a workload of its own unless ``workload`` names
        one); ``invalid``: why it is the client's own error, where it is one; ``content``:
        bytes sent as the body in place of ``body``'s JSON (a malformed one)."""
        client = Client(self.base_url, self.history, deadlines or self.deadlines)
        try:
            return client.request(
                path,
                body,
                phase=phase,
                workload=workload or self._name("request"),
                hang_up_after=hang_up_after,
                invalid=invalid,
                content=content,
            )
        finally:
            client.close()

    def unfinished(
        self,
        path: str,
        *,
        declared: int,
        sent: bytes,
        invalid: str,
        phase: Phase = Phase.DERIVED,
        deadlines: Deadlines | None = None,
    ) -> Complete:
        """One request whose head declares ``declared`` bytes of body of which only ``sent``
        ever comes (``chaos.clients.unfinished``): a body beyond any sane size, or one that
        never finishes."""
        return send_unfinished(
            self.base_url,
            self.history,
            deadlines or self.deadlines,
            path,
            declared=declared,
            sent=sent,
            invalid=invalid,
            phase=phase,
            workload=self._name("unfinished"),
        )

    def background(
        self,
        bodies: list[dict[str, Any]],
        *,
        path: str = "/v1/chat/completions",
        phase: Phase = Phase.DERIVED,
        deadlines: Deadlines | None = None,
        hang_up_after: HangUp | None = None,
        interval_s: float = 0.0,
        invalid: str = "",
        stop: threading.Event | None = None,
    ) -> "InFlight":
        """Send every body at once (or one every ``interval_s``, until ``stop`` is set), each
        on its own connection, in the background: requests in flight while a fault happens.
        ``join()`` waits for them, bounded by their deadlines. ``invalid``: why every one is
        the client's own error, where they are."""
        d = deadlines or self.deadlines
        name = self._name("background")
        sends: list[Callable[[], Complete]] = [
            partial(
                self.request,
                path,
                body,
                phase=phase,
                deadlines=d,
                hang_up_after=hang_up_after,
                workload=name,
                invalid=invalid,
            )
            for body in bodies
        ]
        return InFlight.start(sends, d, interval_s=interval_s, name=name, stop=stop)

    def openai_background(
        self,
        texts: list[str],
        *,
        max_tokens: int,
        stream: bool = True,
        phase: Phase = Phase.DERIVED,
        deadlines: Deadlines | None = None,
    ) -> "InFlight":
        """Like ``background``, through the official ``openai`` client (``chaos.clients.openai_client``),
        one client per request."""
        from chaos.clients.openai_client import OpenAIClient  # the openai package is only needed here

        d = deadlines or self.deadlines
        name = self._name("openai_background")

        def send(text: str) -> Complete:
            client = OpenAIClient(self.base_url, self.history, d, model=self.model)
            try:
                return client.chat(text, max_tokens=max_tokens, stream=stream, phase=phase, workload=name)
            finally:
                client.close()

        return InFlight.start([partial(send, text) for text in texts], d, name=name)

    def abort_storm(
        self, n: int, *, after_events: int = 2, max_tokens: int = 200, phase: Phase = Phase.DERIVED
    ) -> list[Complete]:
        """``n`` streams at once, each hung up by its client after ``after_events`` events."""
        bodies = [self.chat(f"a long story {i}", max_tokens=max_tokens, ignore_eos=True, stream=True) for i in range(n)]
        return self.background(bodies, phase=phase, hang_up_after=after_events).join()

    def probe_until_ok(self, *, within_s: float, interval_s: float = 0.25) -> Complete:
        """Fresh short requests (phase "probe") until one succeeds or ``within_s`` passes."""
        body = self.chat("recovery probe", max_tokens=2)
        short = Deadlines(connect_s=1.0, read_s=min(5.0, within_s), stall_s=2.0, total_s=min(5.0, within_s))
        retry = Retrying(
            stop=stop_after_delay(within_s), wait=wait_fixed(interval_s), retry=retry_if_result(lambda r: not r.ok)
        )
        try:
            with waiting("a recovery probe to succeed", within_s + short.ends_within_s):
                return retry(self.request, "/v1/chat/completions", body, phase=Phase.PROBE, deadlines=short)
        except RetryError as gave_up:
            last: Complete = gave_up.last_attempt.result()
            return last
