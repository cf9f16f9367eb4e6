"""How a verdict is declared: a judge function of the history and its parameters, under
``@verdict`` (or ``@premise``) with the label people read.

    @verdict(lambda within_s, **_: f"every_request_terminal(within={within_s:g}s)")
    def every_request_terminal(h: History, *, within_s: float) -> Finding:
        ...
        return failed(f"{len(slow)} over the bound", ops=[...], slowest_s=worst)

Calling the declared function with its parameters (no history) gives a ``Check``: what
``scenario.judge`` takes, and what judges the history once the body has ended. Its kind is
the function's name; its parameters are kept as data, so that a known issue or the kill
matrix names a verdict by kind and parameters, never by its wording.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Concatenate, Iterable, ParamSpec

from chaos.judge.model import Finding, Role, Verdict
from chaos.observe.history import History

__all__ = ["DECLARED", "Check", "Window", "premise", "verdict"]

P = ParamSpec("P")

# Every verdict and premise declared so far, by kind: its role and the module that declares
# it; what a test walks to hold each one to the same rules (tests/judge/test_at_stake.py)
DECLARED: dict[str, tuple[Role, str]] = {}


@dataclass(frozen=True)
class Window:
    """A verdict judged on the samples of a window that closes at a moment the history
    tells: ``closes(history, **params)`` (None: not yet known), from the sources
    ``sources(**params)`` names. The scenario keeps sampling until those sources are sampled
    through it, or the check has passed (a pass is final: a later sample cannot undo a
    watchdog that fired on time, or a gauge that came back), so that no verdict it declared
    is judged on a window cut short (``Scenario.conclude``)."""

    closes: Callable[..., float | None]
    sources: Callable[..., Iterable[str]]


@dataclass(frozen=True)
class Check:
    """A declared verdict or premise, ready to judge a history."""

    kind: str
    name: str
    params: dict[str, Any]
    judge: Callable[[History], Finding] = field(repr=False)
    role: Role = Role.VERDICT
    window: Callable[[History], float | None] | None = field(default=None, repr=False)
    sources: tuple[str, ...] = ()
    by: str = "test"  # who declared it: the test, or the kit on its behalf ("settle")

    def __call__(self, history: History) -> Verdict:
        found = self.judge(history)
        return Verdict(
            self.kind, self.name, found.status, found.message, self.params, found.evidence, self.role, self.by
        )


def verdict(
    label: Callable[..., str], *, window: Window | None = None, role: Role = Role.VERDICT
) -> Callable[[Callable[Concatenate[History, P], Finding]], Callable[P, Check]]:
    """Declare a verdict: ``label(**params)`` names it for people; ``window``, if its
    evidence is sampled through a window the scenario must observe to its close."""

    def declare(judge: Callable[Concatenate[History, P], Finding]) -> Callable[P, Check]:
        signature = inspect.signature(judge)

        @functools.wraps(judge)
        def make(*args: P.args, **kwargs: P.kwargs) -> Check:
            bound = signature.bind(None, *args, **kwargs)
            bound.apply_defaults()
            params = dict(list(bound.arguments.items())[1:])  # all but the history

            def judged(history: History) -> Finding:
                return judge(history, *args, **kwargs)

            closes = None if window is None else functools.partial(window.closes, **params)
            sources = () if window is None else tuple(dict.fromkeys(window.sources(**params)))
            return Check(judge.__name__, label(**params), params, judged, role, closes, sources)

        DECLARED[judge.__name__] = (role, judge.__module__ or "")
        return make

    return declare


def premise(label: Callable[..., str]) -> Callable[[Callable[Concatenate[History, P], Finding]], Callable[P, Check]]:
    """Declare a premise: what the run must have done for its verdicts to mean anything (the
    fault met requests, the load queued). ``scenario.require`` takes it; unmet, the run
    tested nothing and errors."""
    return verdict(label, role=Role.PREMISE)
