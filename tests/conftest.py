"""Fixtures of the project's own tests (the rig's are in ``chaos.fixtures``)."""

from __future__ import annotations

import pytest

from chaos.fixtures import ensure_steady


@pytest.fixture(autouse=True)
def _steady_shared_stack(request: pytest.FixtureRequest) -> None:
    """A test on its worker's shared stack starts from a steady state whatever ran before
    it there: tests run in another order on each worker, so none may inherit another's
    aftermath (a circuit a fault opened closes within the breaker's timeout). The
    ``workload`` fixture does the same for the tests that use it."""
    if "stack" in request.fixturenames and "workload" not in request.fixturenames:
        ensure_steady(request.getfixturevalue("stack"))
