"""Faults on an engine link of a deployment pd-chaos did not start, through the commands its
stack file gives (``links.<link>`` in ``chaos.targets.stackfile``).

pd-chaos puts packet rules only in namespaces it made itself (``chaos.netns``), so on a
foreign deployment it runs the operator's own commands instead: whatever breaks a link
there (``tc`` and ``iptables`` in a pod through ``kubectl exec``, a Chaos Mesh
``NetworkChaos`` applied and deleted, ``pdchaos link`` on a stack pd-chaos did start). The
contract is small: a command per fault (``blackhole``, ``reset``, ``refuse``, ``crawl`` with
``{rate_kbit}`` in it), ``heal`` to undo whatever is on the link, and ``active``, which exits
0 while a fault is on the link and 1 when none is, its output being the evidence. A command
that fails, or an ``active`` that says otherwise than the fault expects, is the fault not
applied (or not healed): never a silent no-op.
"""

from __future__ import annotations

from collections.abc import Callable
from subprocess import CompletedProcess

from chaos.errors import FaultNotApplied, FaultNotHealed
from chaos.faults.base import Fault
from chaos.netns import MODES
from chaos.targets.base import ENGINES

__all__ = ["CommandedLinkFault"]

Runner = Callable[[str, str], CompletedProcess[str]]  # (command, what) -> the finished command


def _tail(done: CompletedProcess[str]) -> str:
    return " | ".join((done.stdout + done.stderr).strip().splitlines()[-3:]) or "no output"


class CommandedLinkFault(Fault):
    """``mode`` (blackhole, reset, refuse), or with ``rate_kbit`` a crawl, on ``link`` by the
    commands ``commands`` (the link's entry of the stack file), each run by ``run``."""

    kind = "link"

    def __init__(self, link: str, commands: dict[str, str], run: Runner, *, mode: str = "", rate_kbit: int | None = None) -> None:
        if (mode in MODES) == (rate_kbit is not None):
            raise ValueError(f"a link fault is one of {', '.join(MODES)} or a crawl (rate_kbit), not mode={mode!r} rate_kbit={rate_kbit}")
        self.link, self.commands, self._run = link, commands, run
        self.action = mode or "crawl"
        self.rate_kbit = rate_kbit

    @property
    def implicates(self) -> tuple[str, ...]:
        return ENGINES  # both ends of a link between the engines

    def describe(self) -> str:
        what = f"crawl at {self.rate_kbit} kbit/s" if self.rate_kbit is not None else self.action
        return f"{what} on {self.link} (the stack file's commands)"

    def _do(self, action: str) -> CompletedProcess[str]:
        cmd = self.commands[action].replace("{rate_kbit}", str(self.rate_kbit))
        return self._run(cmd, f"links.{self.link}.{action} (`{cmd}`)")

    def inject(self) -> None:
        done = self._do(self.action)
        if done.returncode != 0:
            raise FaultNotApplied(f"links.{self.link}.{self.action} exited {done.returncode}: {_tail(done)}")

    def verify(self) -> str:
        done = self._do("active")
        if done.returncode != 0:
            raise FaultNotApplied(f"links.{self.link}.active exited {done.returncode} after {self.action}: {_tail(done)}")
        return f"links.{self.link}.active: {_tail(done)}"

    def heal(self) -> None:
        done = self._do("heal")
        if done.returncode != 0:
            raise FaultNotHealed(f"links.{self.link}.heal exited {done.returncode}: {_tail(done)}")

    def verify_healed(self) -> str:
        done = self._do("active")
        if done.returncode != 1:
            raise FaultNotHealed(f"links.{self.link}.active exited {done.returncode} after heal (1 means none): {_tail(done)}")
        return f"links.{self.link}.active exited 1: {_tail(done)}"
