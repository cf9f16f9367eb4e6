"""Network faults on Toxiproxy links: toxics (latency, bandwidth, timeout = blackhole,
reset_peer, slicer, limit_data) and a proxy turned off (down).

Verification reads the toxic back from the API (type, stream, toxicity, attributes) and,
on links that speak HTTP (client_router, bootstrap), sends one probe through the proxy and
checks that the traffic is affected the way the toxic says. Raw TCP links (control, kv)
cannot be probed without speaking pdsim's or SGLang's wire protocol, so there the readback
is the evidence; scenarios check the effect through their own triggers and verdicts.
Semantics are Toxiproxy's own (shared/reference/anchors.md §3): a ``timeout`` toxic closes
its connections when removed; ``bandwidth`` with rate 0 holds data and flushes on removal.
"""

from __future__ import annotations

import socket
import time
from typing import Callable

import httpx

from chaos.errors import FaultNotApplied, FaultNotHealed, ToxiproxyError
from chaos.faults.base import Fault
from chaos.system.topology import link_ends
from chaos.system.wait import PROBE
from chaos.targets.base import Capability, Target
from chaos.targets.toxiproxy import Toxic, ToxiproxyClient

__all__ = ["ProxyDown", "ToxicFault", "enable_proxy", "remove_toxic", "toxiproxy_restarter"]

Restarter = Callable[[], None]


def toxiproxy_restarter(target: Target) -> Restarter | None:
    """How to heal by force on this target: a fresh Toxiproxy with its proxies created again
    (where the target controls its processes), else None."""
    if Capability.PROCESS_CONTROL not in target.capabilities:
        return None
    return lambda: target.restart("toxiproxy")


def remove_toxic(client: ToxiproxyClient, proxy: str, name: str, *, restart_toxiproxy: Restarter | None) -> str:
    """Remove a toxic, every call bounded; returns how, for the heal's evidence.

    Toxiproxy 2.12.0 can block a toxic's removal while it holds the proxy's toxic collection
    lock, and then every call on that proxy hangs too, disabling it included
    (Shopify/toxiproxy#558, fix open in #760). So: the DELETE; if it fails, the proxy cycled
    off and on (``remove_toxic_or_cycle``); if that hangs too, a fresh Toxiproxy, its proxies
    created again, where the target can restart it. Without that, ``FaultNotHealed``: the
    stack stays unsteady for what comes after, and says why. Every path that removes a toxic
    (faults, the rig's own tests, fixtures) heals through here."""

    def heal() -> str:
        return "; proxy cycled: its DELETE failed" if client.remove_toxic_or_cycle(proxy, name) else ""

    return _or_fresh_toxiproxy(
        heal, "removing the toxic", f"cannot remove toxic {name} from {proxy}", restart_toxiproxy
    )


def enable_proxy(client: ToxiproxyClient, proxy: str, *, restart_toxiproxy: Restarter | None) -> str:
    """Turn a proxy back on, bounded as ``remove_toxic``: a hung API is healed by a fresh
    Toxiproxy (every proxy created enabled) where the target can restart it."""

    def heal() -> str:
        client.enable(proxy)
        return ""

    return _or_fresh_toxiproxy(heal, "enabling the proxy", f"cannot enable {proxy}", restart_toxiproxy)


def _or_fresh_toxiproxy(heal: Callable[[], str], doing: str, failed: str, restart_toxiproxy: Restarter | None) -> str:
    """``heal()``'s evidence; if Toxiproxy's API fails it, a fresh Toxiproxy (no toxic, every
    proxy enabled) where the target can restart one, else ``FaultNotHealed``."""
    try:
        return heal()
    except ToxiproxyError as exc:
        if restart_toxiproxy is None:
            raise FaultNotHealed(f"{failed}: {exc}") from exc
        restart_toxiproxy()
        return f"; Toxiproxy restarted: its API hung {doing} ({exc})"


_PROBE_TIMEOUT_S = 1.0


def _link_ends(proxy: str) -> tuple[str, ...]:
    """The engines a broken link strikes: both ends of a link between them (bootstrap,
    control, kv; ``kv2`` ends at decode2); none for the client's link to the router."""
    return () if proxy == "client_router" else link_ends(proxy)


def _probe(url: str, timeout_s: float) -> tuple[str, float]:
    """One GET: ("ok"|"timeout"|"refused"|"reset"|"error", elapsed)."""
    t0 = time.monotonic()
    try:
        PROBE.get(url, timeout=httpx.Timeout(timeout_s, connect=timeout_s))
        result = "ok"
    except httpx.ConnectError as exc:
        result = "refused" if "refused" in str(exc).lower() else "reset"
    except httpx.TimeoutException:
        result = "timeout"
    except (httpx.RemoteProtocolError, httpx.ReadError):
        result = "reset"
    except httpx.HTTPError:
        result = "error"
    return result, time.monotonic() - t0


class ToxicFault(Fault):
    """A toxic on one link, healed by ``remove_toxic`` (by force where the API hangs)."""

    kind = "toxic"

    def __init__(
        self,
        client: ToxiproxyClient,
        proxy: str,
        toxic: Toxic,
        *,
        probe_url: str | None = None,
        restart_toxiproxy: Restarter | None = None,
    ) -> None:
        self.client, self.proxy, self.toxic, self.probe_url = client, proxy, toxic, probe_url
        self._restart_toxiproxy, self._forced = restart_toxiproxy, ""

    @property
    def implicates(self) -> tuple[str, ...]:
        return _link_ends(self.proxy)

    def describe(self) -> str:
        attrs = ",".join(f"{k}={v}" for k, v in self.toxic.attributes.items())
        return f"{self.toxic.type}({attrs}) on {self.proxy} {self.toxic.stream}"

    def inject(self) -> None:
        self.client.add_toxic(self.proxy, self.toxic)

    def _listed(self) -> Toxic | None:
        return next((t for t in self.client.toxics(self.proxy) if t.name == self.toxic.name), None)

    def verify(self) -> str:
        listed = self._listed()
        if listed is None:
            raise FaultNotApplied(f"toxic {self.toxic.name} is not listed on {self.proxy}")
        if (listed.type, listed.stream, listed.toxicity) != (
            self.toxic.type,
            self.toxic.stream,
            self.toxic.toxicity,
        ) or any(listed.attributes.get(k) != v for k, v in self.toxic.attributes.items()):
            raise FaultNotApplied(f"toxic on {self.proxy} reads back as {listed}, not {self.toxic}")
        evidence = f"listed on {self.proxy}: {listed.type} {listed.stream} {listed.attributes}"
        return evidence + self._probe_effect()

    def _probe_effect(self) -> str:
        if self.probe_url is None:
            return " (raw TCP link: no probe)"
        kind, attrs = self.toxic.type, self.toxic.attributes
        if kind == "latency":
            want = (attrs.get("latency", 0) - attrs.get("jitter", 0)) / 1000
            result, took = _probe(self.probe_url, want + _PROBE_TIMEOUT_S)
            if result != "ok" or took < want:
                raise FaultNotApplied(
                    f"probe through {self.proxy} took {took:.3f}s ({result}); expected >= {want:.3f}s"
                )
        elif kind == "timeout" or (kind == "bandwidth" and attrs.get("rate") == 0):
            result, took = _probe(self.probe_url, _PROBE_TIMEOUT_S)
            blackholed = result == "timeout" or (attrs.get("timeout", 0) > 0 and result == "reset")
            if not blackholed:
                raise FaultNotApplied(f"probe through blackholed {self.proxy} got {result} after {took:.3f}s")
        elif kind in ("reset_peer", "limit_data"):
            result, took = _probe(self.probe_url, _PROBE_TIMEOUT_S + attrs.get("timeout", 0) / 1000)
            if result == "ok" and kind == "reset_peer":
                raise FaultNotApplied(f"probe through {self.proxy} was not reset")
        else:
            return " (no probe for this toxic type)"
        return f"; probe: {result} after {took:.3f}s"

    def heal(self) -> None:
        self._forced = remove_toxic(self.client, self.proxy, self.toxic.name, restart_toxiproxy=self._restart_toxiproxy)

    def verify_healed(self) -> str:
        if self._listed() is not None:
            raise FaultNotHealed(f"toxic {self.toxic.name} still listed on {self.proxy}")
        return f"no toxic {self.toxic.name} on {self.proxy}{self._forced}"


class ProxyDown(Fault):
    """The link is down: new connections refused, existing ones closed (Toxiproxy disable)."""

    kind = "down"

    def __init__(
        self, client: ToxiproxyClient, proxy: str, listen: str, *, restart_toxiproxy: Restarter | None = None
    ) -> None:
        self.client, self.proxy, self.listen = client, proxy, listen
        self._restart_toxiproxy, self._forced = restart_toxiproxy, ""

    @property
    def implicates(self) -> tuple[str, ...]:
        return _link_ends(self.proxy)

    def describe(self) -> str:
        return f"{self.proxy} down"

    def inject(self) -> None:
        self.client.disable(self.proxy)

    def _connects(self) -> bool:
        host, _, port = self.listen.rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=_PROBE_TIMEOUT_S):
                return True
        except OSError:
            return False

    def verify(self) -> str:
        if self.client.get(self.proxy).enabled:
            raise FaultNotApplied(f"{self.proxy} still enabled")
        if self._connects():
            raise FaultNotApplied(f"{self.listen} still accepts connections")
        return f"{self.proxy} disabled; connect to {self.listen} refused"

    def heal(self) -> None:
        self._forced = enable_proxy(self.client, self.proxy, restart_toxiproxy=self._restart_toxiproxy)

    def verify_healed(self) -> str:
        if not self.client.get(self.proxy).enabled or not self._connects():
            raise FaultNotHealed(f"{self.proxy} not accepting connections after enable")
        return f"{self.proxy} enabled; {self.listen} accepts connections{self._forced}"
