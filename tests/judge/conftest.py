"""Every verdict judged in these tests is pinned: what it found, not what it says.

The tests here assert the figures each claim rests on; a verdict's evidence carries more
(times, counts, the keys known issues and reports read) than a test names. Each test's
judgements, in order, are compared with ``__snapshots__/`` (syrupy): status, role, params
and evidence, never the message or the label, which are words for people. A change to
what a verdict finds shows as a diff; when it is meant, ``pytest tests/judge
--snapshot-update`` records it, and the diff goes in the commit for review.
"""

from __future__ import annotations

from typing import Any, Iterator

import pytest
from syrupy.assertion import SnapshotAssertion
from syrupy.extensions.json import JSONSnapshotExtension

from chaos.judge.declare import Check
from chaos.judge.model import Verdict
from chaos.observe.history import History


def _found(v: Verdict) -> dict[str, Any]:
    return {key: value for key, value in v.as_json().items() if key not in ("message", "name")}


@pytest.fixture(autouse=True)
def _judged(snapshot: SnapshotAssertion, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    judged: list[dict[str, Any]] = []
    judge = Check.__call__

    def pinned(check: Check, history: History) -> Verdict:
        v = judge(check, history)
        judged.append(_found(v))
        return v

    monkeypatch.setattr(Check, "__call__", pinned)
    yield
    if judged:
        assert judged == snapshot(extension_class=JSONSnapshotExtension)
