"""``chaos.observe.growth``, judged on histories written by hand."""

from __future__ import annotations

from chaos import verdicts as v
from chaos.observe.growth import CHECKPOINT, Limit
from chaos.observe.history import History
from chaos.observe.pipeline import Metric
from chaos.observe.records import Sample, TriggerFired
from suites.test_soak import does_not_grow
from tests.judge.histories import soak_history, status


def test_growth_leaves_out_the_warm_up_and_allows_a_share_of_the_first_value():
    warming = soak_history(
        [(0, 100.0), (2, 150.0), (4, 200.0), (6, 200.0), (8, 200.0), (10, 200.0), (12, 200.0), (14, 200.0)],
        "rss_bytes:router",
    )
    rss = Limit(Metric("procs", "rss_bytes:router"), 0, relative=0.05)
    assert status(does_not_grow([rss]), warming) is v.Status.PASS  # the first quarter is warm-up
    growing = soak_history(
        [(t, 200.0 + 2 * t) for t in range(0, 16, 2)], "rss_bytes:router"
    )  # +20 over the window: 10% of 200
    assert status(does_not_grow([rss]), growing) is v.Status.FAIL
    assert (
        status(does_not_grow([Limit(Metric("procs", "rss_bytes:router"), 0, relative=0.2)]), growing) is v.Status.PASS
    )


def test_a_reading_that_caught_something_in_passing_is_no_growth():
    """SGLang's /metrics token count lags until decode logs its next batch: a checkpoint may
    read a spike. A leak raises the floor; a spike does not."""
    tokens = Limit(Metric("decode", "num_used_tokens"), 0)
    spiky = History()
    for t, value in enumerate([0, 0, 0, 0, 142, 0, 0, 0, 1131, 0, 0, 429]):
        spiky.append(Sample(float(t), "decode", {"num_used_tokens": float(value)}))
        spiky.append(TriggerFired(t + 0.1, CHECKPOINT, "quiet"))
    assert status(does_not_grow([tokens]), spiky) is v.Status.PASS
