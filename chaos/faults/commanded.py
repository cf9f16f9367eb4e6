"""Faults on an engine link of a deployment pd-chaos did not start, through the commands its
stack file gives (``links.<link>`` in ``chaos.targets.stackfile``).

pd-chaos puts packet rules only in namespaces it made itself (``chaos.system.netns``), so on a
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

from chaos.errors import ConfigError, FaultNotApplied, FaultNotHealed
from chaos.faults.packet import LinkFault

__all__ = ["CommandedLinkFault"]

Runner = Callable[[str, str], CompletedProcess[str]]  # (command, what) -> the finished command


def _tail(done: CompletedProcess[str]) -> str:
    return " | ".join((done.stdout + done.stderr).strip().splitlines()[-3:]) or "no output"


class CommandedLinkFault(LinkFault):
    """``mode`` (blackhole, reset, refuse), or with ``rate_kbit`` a crawl, on ``link`` by the
    commands ``commands`` (the link's entry of the stack file), each run by ``run``."""

    kind = "link"
    how = "the stack file's commands"

    def __init__(
        self, link: str, commands: dict[str, str], run: Runner, *, mode: str = "", rate_kbit: int | None = None
    ) -> None:
        super().__init__(link, mode=mode, rate_kbit=rate_kbit)
        self.commands, self._run = commands, run
        self.action = mode or "crawl"
        if self.action not in commands:
            raise ConfigError(f"the stack file gives no links.{link}.{self.action} command")

    def _expect(self, action: str, status: int, error: type[Exception], after: str = "") -> str:
        """Run the link's ``action`` command; its output, or ``error`` if it exits otherwise than ``status``."""
        cmd = self.commands[action].replace("{rate_kbit}", str(self.rate_kbit))
        done = self._run(cmd, f"links.{self.link}.{action} (`{cmd}`)")
        if done.returncode != status:
            raise error(f"links.{self.link}.{action} exited {done.returncode}{after}: {_tail(done)}")
        return _tail(done)

    def inject(self) -> None:
        self._expect(self.action, 0, FaultNotApplied)

    def verify(self) -> str:
        return f"links.{self.link}.active: {self._expect('active', 0, FaultNotApplied, f' after {self.action}')}"

    def heal(self) -> None:
        self._expect("heal", 0, FaultNotHealed)

    def verify_healed(self) -> str:
        return f"links.{self.link}.active exited 1: {self._expect('active', 1, FaultNotHealed, ' after heal (1 means none)')}"
