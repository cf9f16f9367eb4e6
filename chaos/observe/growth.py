"""How a quantity grows across a soak: its values at the soak's checkpoints (moments the
system was quiet), their least-squares line (the slope a report shows), and how much their
floor rose over the window (what a verdict judges). The ``does_not_grow`` verdict and the
soak report both read it from here.

A checkpoint is a ``TriggerFired`` named ``CHECKPOINT``, taken once the system went quiet
(or was still busy after a bound: then what it holds is what grew), where a gauge that
should be 0 is 0 and memory is not inflated by requests in flight.
The first ``WARMUP`` of the checkpoints is left out: allocators, caches and pools grow once.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from chaos.observe.history import History
from chaos.observe.pipeline import Metric
from chaos.observe.records import Sample, TriggerFired

__all__ = ["CHECKPOINT", "WARMUP", "Fit", "Limit", "checkpoints", "fit"]

CHECKPOINT = "soak checkpoint"
WARMUP = 0.25
_LATEST_WITHIN_S = 2.5  # a checkpoint reads a sample at most this old (processes are sampled each second)


@dataclass(frozen=True)
class Limit:
    """The most ``metric`` may grow over the soak's window: ``most`` in its unit, or
    ``relative`` of its first value, whichever is larger. A raw value is ``scale`` of the
    unit (bytes read in MiB: ``scale=2**20``)."""

    metric: Metric
    most: float
    relative: float = 0.0
    unit: str = ""
    scale: float = 1.0

    @property
    def label(self) -> str:
        return f"{self.metric[0]}:{self.metric[1]}"

    def allowed(self, fit: Fit) -> float:
        """The growth allowed, raw, over ``fit``'s window: the relative part is of its first value."""
        return max(self.most * self.scale, self.relative * abs(fit.points[0][1]))

    def show(self, raw: float, *, sign: bool = True) -> str:
        return f"{raw / self.scale:{'+' if sign else ''}.3g}{self.unit}"


@dataclass(frozen=True)
class Fit:
    metric: Metric
    points: list[tuple[float, float]]  # (history time, value) at each checkpoint after warm-up
    slope_per_s: float
    intercept: float

    @property
    def window_s(self) -> float:
        return self.points[-1][0] - self.points[0][0]

    @property
    def growth(self) -> float:
        """How much the floor rose: the lowest value of the window's last third less the
        lowest of its first. A leak raises the floor; a reading that caught something in
        passing (a gauge that lags, as SGLang's /metrics token count does until decode
        logs its next batch) is a spike above it, and moves no floor."""
        third = max(1, len(self.points) // 3)
        return min(v for _, v in self.points[-third:]) - min(v for _, v in self.points[:third])


def checkpoints(history: History) -> list[float]:
    return [r.t for r in history.of(TriggerFired) if r.trigger == CHECKPOINT]


def _at(samples: list[Sample], metric: str, t: float) -> float | None:
    """The latest value of ``metric`` at or before ``t``, if recent enough."""
    best = None
    for s in samples:
        if s.t > t:
            break
        if metric in s.values and t - s.t <= _LATEST_WITHIN_S:
            best = s.values[metric]
    return best


def fit(history: History, metric: Metric, *, warmup: float = WARMUP) -> Fit | None:
    """The line through ``metric``'s values at the checkpoints after warm-up; None with
    fewer than three values (missing evidence is no fit, never a flat one)."""
    times = checkpoints(history)
    times = times[int(len(times) * warmup) :]
    source, name = metric
    samples = sorted((s for s in history.of(Sample) if s.source == source), key=lambda s: s.t)
    points = [(t, v) for t in times if (v := _at(samples, name, t)) is not None]
    if len(points) < 3 or points[-1][0] == points[0][0]:
        return None
    slope, intercept = statistics.linear_regression([t for t, _ in points], [v for _, v in points])
    return Fit(metric, points, slope, intercept)
