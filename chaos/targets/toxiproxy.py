"""A Toxiproxy 2.x API client over httpx, with a timeout on every call.

Why not toxiproxy-python: it has no request timeouts (a hung API hangs the test), keeps
the server address in class-level globals (one server per process), cannot update a
toxic, and its last release is from 2019. Field names and units here are Toxiproxy's own
(``latency`` in ms, ``rate`` in KB/s, ``timeout`` in ms, ``bytes``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from chaos.errors import ProxyExists, ProxyNotFound, ToxiproxyError

__all__ = ["Proxy", "Toxic", "ToxiproxyClient"]

Stream = Literal["upstream", "downstream"]
DEFAULT_TIMEOUT = httpx.Timeout(5.0, connect=2.0)


@dataclass(frozen=True)
class Toxic:
    name: str
    type: str
    stream: Stream = "downstream"
    toxicity: float = 1.0
    attributes: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "stream": self.stream,
            "toxicity": self.toxicity,
            "attributes": self.attributes,
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> "Toxic":
        return cls(
            raw["name"],
            raw["type"],
            raw.get("stream", "downstream"),
            float(raw.get("toxicity", 1.0)),
            dict(raw.get("attributes") or {}),
        )


@dataclass(frozen=True)
class Proxy:
    name: str
    listen: str
    upstream: str
    enabled: bool
    toxics: tuple[Toxic, ...] = ()

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> "Proxy":
        return cls(
            raw["name"],
            raw["listen"],
            raw["upstream"],
            bool(raw["enabled"]),
            tuple(Toxic.from_json(t) for t in raw.get("toxics") or ()),
        )


class ToxiproxyClient:
    """One client per Toxiproxy server; every call is bounded by ``timeout``."""

    def __init__(self, api_url: str, *, timeout: httpx.Timeout = DEFAULT_TIMEOUT) -> None:
        self.api_url = api_url.rstrip("/")
        self._http = httpx.Client(base_url=self.api_url, timeout=timeout, headers={"User-Agent": "pd-chaos"})

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "ToxiproxyClient":
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _call(self, method: str, path: str, json: Any = None) -> Any:
        try:
            r = self._http.request(method, path, json=json)
        except httpx.HTTPError as exc:
            raise ToxiproxyError(
                f"Toxiproxy {method} {path} at {self.api_url} failed: {type(exc).__name__}: {exc}"
            ) from exc
        if r.status_code == 404:
            raise ProxyNotFound(f"Toxiproxy {method} {path}: {r.text.strip()}")
        if r.status_code == 409:
            raise ProxyExists(f"Toxiproxy {method} {path}: {r.text.strip()}")
        if r.status_code >= 400:
            raise ToxiproxyError(f"Toxiproxy {method} {path}: HTTP {r.status_code} {r.text.strip()}")
        return r.json() if r.content and r.headers.get("content-type", "").startswith("application/json") else None

    def version(self) -> str:
        try:
            r = self._http.get("/version")
            r.raise_for_status()
        except httpx.HTTPError as exc:
            raise ToxiproxyError(f"Toxiproxy at {self.api_url} did not answer /version: {exc}") from exc
        try:
            return str(r.json().get("version"))
        except ValueError:
            return r.text.strip()

    def proxies(self) -> dict[str, Proxy]:
        return {name: Proxy.from_json(raw) for name, raw in (self._call("GET", "/proxies") or {}).items()}

    def get(self, name: str) -> Proxy:
        return Proxy.from_json(self._call("GET", f"/proxies/{name}"))

    def create(self, name: str, *, listen: str, upstream: str, enabled: bool = True) -> Proxy:
        return Proxy.from_json(
            self._call("POST", "/proxies", {"name": name, "listen": listen, "upstream": upstream, "enabled": enabled})
        )

    def update(self, name: str, **fields: Any) -> Proxy:
        """Change ``enabled``, ``listen`` or ``upstream``; a listen/upstream change restarts it."""
        return Proxy.from_json(self._call("PATCH", f"/proxies/{name}", fields))

    def enable(self, name: str) -> Proxy:
        return self.update(name, enabled=True)

    def disable(self, name: str) -> Proxy:
        return self.update(name, enabled=False)

    def delete(self, name: str) -> None:
        self._call("DELETE", f"/proxies/{name}")

    def add_toxic(self, proxy: str, toxic: Toxic) -> Toxic:
        return Toxic.from_json(self._call("POST", f"/proxies/{proxy}/toxics", toxic.to_json()))

    def update_toxic(
        self, proxy: str, name: str, *, attributes: dict[str, Any], toxicity: float | None = None
    ) -> Toxic:
        body: dict[str, Any] = {"attributes": attributes}
        if toxicity is not None:
            body["toxicity"] = toxicity
        return Toxic.from_json(self._call("PATCH", f"/proxies/{proxy}/toxics/{name}", body))

    def toxics(self, proxy: str) -> list[Toxic]:
        return [Toxic.from_json(t) for t in self._call("GET", f"/proxies/{proxy}/toxics") or ()]

    def remove_toxic(self, proxy: str, name: str) -> None:
        self._call("DELETE", f"/proxies/{proxy}/toxics/{name}")

    def remove_toxic_or_cycle(self, proxy: str, name: str) -> bool:
        """Remove a toxic, by force if Toxiproxy hangs doing it; True if force was needed.

        Toxiproxy 2.12.0 can block a toxic's removal when the toxic holds data for a peer
        that has closed (seen with ``bandwidth``: the DELETE hangs past our timeout). Turning
        the proxy off closes its links, which unblocks the removal; the proxy is then turned
        back on and the toxic verified gone.
        """
        try:
            self.remove_toxic(proxy, name)
            return False
        except ProxyNotFound:
            return False
        except ToxiproxyError:
            self.disable(proxy)
            self.enable(proxy)
            if any(t.name == name for t in self.toxics(proxy)):
                self.remove_toxic(proxy, name)
            return True

    def reset(self) -> None:
        """Enable every proxy and remove every toxic (proxies stay)."""
        self._call("POST", "/reset")
