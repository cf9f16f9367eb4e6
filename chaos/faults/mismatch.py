"""Engines started disagreeing on how the KV is laid out, as a fault: decode's page size is
not prefill's.

Like SGLang's failure hooks (``chaos.faults.hooks``), the mismatch is set when a stack of a
module's own starts (``StackConfig.decode_page_size``) and lasts as long as its engines.
This fault brackets the requests judged under it and proves it where it can: in the command
line decode's process started with.
"""

from __future__ import annotations

import psutil

from chaos.errors import FaultNotApplied
from chaos.faults.base import Fault
from chaos.faults.started import read_started
from chaos.targets.base import Target

__all__ = ["MismatchedPages"]


def _page_size(cmdline: list[str]) -> str | None:
    """The value of ``--page-size`` in a command line (``--page-size 16`` or ``--page-size=16``)."""
    for i, arg in enumerate(cmdline):
        if arg == "--page-size" and i + 1 < len(cmdline):
            return cmdline[i + 1]
        if arg.startswith("--page-size="):
            return arg.split("=", 1)[1]
    return None


class MismatchedPages(Fault):
    kind = "mismatch"

    def __init__(self, target: Target) -> None:
        self.target = target
        self.page_size = target.info.config.get("decode_page_size")

    @property
    def implicates(self) -> tuple[str, ...]:
        return ("decode",)  # the engine started unlike the other

    def describe(self) -> str:
        return f"decode started with --page-size {self.page_size}, prefill with the default"

    def inject(self) -> None:
        """Nothing to do: decode started so."""

    def verify(self) -> str:
        """Decode's process started with the page size, where this host can read it; a stack
        whose engines agree is a rig error, not a run that tested a mismatch."""
        if not self.page_size:
            raise FaultNotApplied("the stack's decode was started with the default page size, as prefill")
        pid, cmdline = read_started(self.target, "decode", "command line", psutil.Process.cmdline)
        seen = _page_size(cmdline)
        if seen != str(self.page_size):
            raise FaultNotApplied(f"decode (pid {pid}) started with --page-size {seen}, not {self.page_size}")
        return f"--page-size {seen} in decode's command line (pid {pid})"

    def heal(self) -> None:
        """Nothing to undo: the mismatch lasts as long as the engines."""

    def verify_healed(self) -> str:
        return "the block ended; the engines of this stack still disagree"
