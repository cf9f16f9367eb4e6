"""``chaos.judge.clock``: each check passes on a good history and fails (or is unknown) on a
crafted bad one, histories written by hand."""

from __future__ import annotations

import pytest

from chaos import verdicts as v
from chaos.judge.clock import Since, start
from chaos.observe.history import History
from chaos.observe.records import Invoke
from tests.judge.histories import fault, op


def test_a_misspelt_phase_or_since_fails_at_once():
    with pytest.raises(ValueError):
        v.no_leak(gauges=[], within_s=1, since="heals")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Invoke(0.0, 0.0, "a", "/p", False, phase="faults")  # type: ignore[arg-type]


def test_since_heal_is_the_heal_even_when_requests_end_after_it():
    h = History()
    fault(h, 1.0, 2.0)
    op(h, "a", 1.5, 4.0)
    assert start(h, Since.HEAL) == 2.0
    assert start(h, Since.QUIET) == 4.0


def test_since_request_is_the_first_request_sent_at_or_after_the_fault():
    h = History()
    fault(h, 1.0, 2.0)
    op(h, "early", 0.5, 1.2)
    op(h, "at", 1.0, 1.4)
    assert start(h, Since.REQUEST) == 1.0
    assert start(History(), Since.REQUEST) is None
