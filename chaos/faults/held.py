"""``pdchaos link``: a packet fault on a stack pd-chaos started, held from one command to the
next, so that a deployment's own tooling, or an attach stack file's ``links`` commands, can
break the link and heal it in separate calls (the worked example in docs/targets.md).

The fault is the suites' ``PacketFault``; what another call needs to find it again (the
namespace, the ports, its tag and class) is kept in ``<state dir>/links/<link>.json`` until
it is healed. One fault per link at a time; each link has its own tc class, so a crawl on
``kv`` and one on ``control`` can coexist.
"""

from __future__ import annotations

import json
from pathlib import Path

from chaos.errors import ConfigError, FaultNotApplied
from chaos.faults.packet import PacketFault, PacketLinks
from chaos.targets.base import Target

__all__ = ["link_command"]

_MINOR = {"kv": 0x8, "control": 0x9}  # below the suites' classes (from 0x10): one per link


def _state_file(target: Target, link: str) -> Path:
    return Path(target.info.state_dir) / "links" / f"{link}.json"


def link_command(target: Target, link: str, action: str, *, rate_kbit: int | None = None) -> tuple[int, str]:
    """Do ``action`` on ``link``: the exit status and the line to print. ``active`` exits 0
    while a fault is on the link (its counters printed), 1 when none is; ``heal`` with none
    on is a no-op, like every heal."""
    if not isinstance(target, PacketLinks) or link not in target.packet_links:
        raise ConfigError(
            f"the {target.info.kind} stack breaks no link {link!r} with packet rules (sglang-cpu does: kv, control)"
        )
    path = _state_file(target, link)
    held = PacketFault.from_state(target, json.loads(path.read_text())) if path.exists() else None
    if action == "active":
        met = held.met() if held else None
        if held is None or met is None:
            return 1, f"no fault on {link}"
        return 0, f"{held.describe()}: met {met} ({held.at.what})"
    if action == "heal":
        if held is None:
            return 0, f"no fault on {link}"
        held.heal()
        evidence = held.verify_healed()
        path.unlink()
        return 0, f"healed {held.describe()}: {evidence}"
    if held is not None:
        raise ConfigError(f"{held.describe()} is on {link} already: `pdchaos link {link} heal` first")
    if action == "crawl" and not rate_kbit:
        raise ConfigError("crawl needs --rate-kbit N (above 0)")
    fault = PacketFault(
        target,
        link,
        mode="" if action == "crawl" else action,
        rate_kbit=rate_kbit if action == "crawl" else None,
        minor=_MINOR[link],
    )
    fault.inject()
    try:
        evidence = fault.verify()
    except FaultNotApplied:
        fault.heal()
        raise
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(fault.to_state()))
    return 0, f"{fault.describe()}: {evidence}"
