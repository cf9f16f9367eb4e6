"""Faults made through an engine's own API: ``/abort_request`` with ``abort_all``, as an
operator (or an engine-side abort) ends every request an engine holds at once."""

from __future__ import annotations

import httpx

from chaos.errors import FaultNotApplied
from chaos.faults.base import Fault
from chaos.targets.base import Target
from chaos.wait import HTTP_CALL_S

__all__ = ["AbortAll"]


class AbortAll(Fault):
    """Every request one engine holds is aborted (SGLang's ``/abort_request``, ``abort_all``).
    Verified by the engine's answer; there is nothing to heal: an abort is a moment."""

    kind = "abort_all"

    def __init__(self, target: Target, service: str) -> None:
        self.target, self.service = target, service
        self._status: int | None = None

    @property
    def implicates(self) -> tuple[str, ...]:
        return (self.service,)

    def describe(self) -> str:
        return f"abort every request on {self.service}"

    def inject(self) -> None:
        reply = httpx.post(
            f"{self.target.info.endpoints[self.service]}/abort_request",
            json={"rid": "", "abort_all": True},
            timeout=HTTP_CALL_S,
        )
        self._status = reply.status_code

    def verify(self) -> str:
        if self._status != 200:
            raise FaultNotApplied(f"{self.service} answered {self._status} to /abort_request")
        return f"{self.service} answered 200 to /abort_request abort_all"

    def heal(self) -> None:
        """Nothing to undo."""

    def verify_healed(self) -> str:
        return "an abort is momentary"
