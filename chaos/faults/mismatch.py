"""Engines started disagreeing, as a fault: decode's KV page size is not prefill's, or one
kind's context length is not the other's.

Like SGLang's failure hooks (``chaos.faults.hooks``), the mismatch is set when a stack of a
module's own starts (``StackConfig.decode_page_size``, ``StackConfig.context_length``) and
lasts as long as its engines. This fault brackets the requests judged under it and proves it
where it can: in the command line the engine's process started with.
"""

from __future__ import annotations

import psutil

from chaos.errors import FaultNotApplied
from chaos.faults.base import Fault
from chaos.faults.started import read_started
from chaos.targets.base import Target

__all__ = ["MismatchedStart"]


def flag_value(cmdline: list[str], flag: str) -> str | None:
    """The value of ``flag`` in a command line (``--page-size 16`` or ``--page-size=16``)."""
    for i, arg in enumerate(cmdline):
        if arg == flag and i + 1 < len(cmdline):
            return cmdline[i + 1]
        if arg.startswith(f"{flag}="):
            return arg.split("=", 1)[1]
    return None


class MismatchedStart(Fault):
    """``service`` started with ``flag`` at ``value``; the engines of the other kind with
    their default."""

    kind = "mismatch"

    def __init__(self, target: Target, service: str, flag: str, value: object) -> None:
        self.target, self.service, self.flag, self.value = target, service, flag, value

    @property
    def implicates(self) -> tuple[str, ...]:
        return (self.service,)  # the engine started unlike the other

    def describe(self) -> str:
        other = "decode" if self.service == "prefill" else "prefill"
        return f"{self.service} started with {self.flag} {self.value}, {other} with the default"

    def inject(self) -> None:
        """Nothing to do: the engine started so."""

    def verify(self) -> str:
        """The engine's process started with the value, where this host can read it; a stack
        whose engines agree is a rig error, not a run that tested a mismatch."""
        if not self.value:
            raise FaultNotApplied(f"the stack's {self.service} was started with the default {self.flag}")
        pid, cmdline = read_started(self.target, self.service, "command line", psutil.Process.cmdline)
        seen = flag_value(cmdline, self.flag)
        if seen != str(self.value):
            raise FaultNotApplied(f"{self.service} (pid {pid}) started with {self.flag} {seen}, not {self.value}")
        return f"{self.flag} {seen} in {self.service}'s command line (pid {pid})"

    def heal(self) -> None:
        """Nothing to undo: the mismatch lasts as long as the engines."""

    def verify_healed(self) -> str:
        return "the block ended; the engines of this stack still disagree"
