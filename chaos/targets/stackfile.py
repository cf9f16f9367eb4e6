"""The attach target's stack file: a YAML description of a deployment pd-chaos did not start.

    name: gpu-box-7
    endpoints:                              # where each hop answers
      client: http://127.0.0.1:30001        # where clients send (through a proxy, if one is in the path)
      router: http://127.0.0.1:30001
      router_metrics: http://127.0.0.1:29001/metrics
      router_loads: http://127.0.0.1:30001/workers   # optional: smg's worker list, its live load counters
      prefill: http://127.0.0.1:30000
      decode: http://127.0.0.1:30002
      toxiproxy: http://127.0.0.1:8474      # optional: network faults need a Toxiproxy in the path
      prefill_loads: http://127.0.0.1:30000/v1/loads?include=core,disagg&format=prometheus   # optional, both or
      decode_loads: http://127.0.0.1:30002/v1/loads?include=core,disagg&format=prometheus    # neither: live queue counts
      canary: http://127.0.0.1:30014        # optional: a free port on this host the engines can dial, where the
                                            # rig listens for dials to an address a hostile client chose
    proxies:                                # optional: Toxiproxy proxies already in the path, by link
      bootstrap: {listen: "127.0.0.1:18998", upstream: "127.0.0.1:8998"}
    services:                               # optional: shell commands per service
      decode:
        running: systemctl is-active --quiet sglang-decode   # exit 0 = running
        kill: systemctl kill -s KILL sglang-decode
        terminate: systemctl kill --kill-whom=main -s TERM sglang-decode   # SIGTERM, no wait
        start: systemctl start sglang-decode
        ...
    links:                                  # optional: commands that break an engine link no proxy sits on
      kv:                                   # (kv, control); heal and active are required
        blackhole: kubectl exec decode-0 -- iptables ...   # also reset, refuse, crawl ({rate_kbit} filled in)
        heal: kubectl exec decode-0 -- iptables -F PDCHAOS
        active: kubectl exec decode-0 -- iptables -S PDCHAOS | grep -q DROP   # exit 0 = a fault is on
    timeouts: {bootstrap_s: 300, waiting_s: 300, inflight_s: 300}   # what the engines run with
                                            # (also disconnect_poll_s: SGLANG_REQUEST_STATE_WAIT_TIMEOUT)
    router: {request_timeout_s: 1800}

Validated with a JSON Schema (jsonschema): every error names the field, such as
``services.decode.kill: 5 is not of type 'string'``.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import yaml

from chaos.errors import ConfigError
from chaos.targets.base import ENGINE_LINKS, SERVICES
from chaos.targets.stack import PROXIES, StackInfo

__all__ = ["COMMANDS", "LINK_COMMANDS", "SVC_ACTIONS", "describe", "load_stack_file"]

# What a service's commands do; `running` and `frozen` answer by exit status (0 = yes).
COMMANDS = ("running", "frozen", "kill", "terminate", "start", "stop", "restart", "freeze", "thaw", "logs")
# What a link's commands do (chaos.faults.commanded); `active` answers by exit status (0 = a fault is on).
LINK_COMMANDS = ("blackhole", "reset", "refuse", "crawl", "heal", "active")
# What `pdchaos svc` does, so the stack file `pdchaos stack-file` writes: every command but terminate.
SVC_ACTIONS = ("running", "frozen", "kill", "start", "stop", "restart", "freeze", "thaw", "logs")

_URL = {"type": "string", "pattern": r"^https?://[^/\s]+(/\S*)?$"}
_ADDR = {"type": "string", "pattern": r"^[^:\s]+:\d+$"}
_SECONDS = {"type": "number", "exclusiveMinimum": 0}
SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["endpoints"],
    "properties": {
        "name": {"type": "string"},
        "endpoints": {
            "type": "object",
            "additionalProperties": False,
            "required": ["client", "router", "router_metrics", "prefill", "decode"],
            "properties": {
                k: _URL
                for k in (
                    "client",
                    "router",
                    "router_metrics",
                    "router_loads",
                    "prefill",
                    "decode",
                    "prefill_bootstrap",
                    "toxiproxy",
                    "prefill_loads",
                    "decode_loads",
                    "canary",
                )
            },
            "dependentRequired": {"prefill_loads": ["decode_loads"], "decode_loads": ["prefill_loads"]},
        },
        "proxies": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                name: {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["listen", "upstream"],
                    "properties": {"listen": _ADDR, "upstream": _ADDR},
                }
                for name in PROXIES
            },
        },
        "services": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                s: {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["running"],
                    "properties": {c: {"type": "string", "minLength": 1} for c in COMMANDS},
                }
                for s in SERVICES
            },
        },
        "links": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                link: {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["heal", "active"],
                    "minProperties": 3,  # and at least one fault
                    "properties": {c: {"type": "string", "minLength": 1} for c in LINK_COMMANDS},
                }
                for link in ENGINE_LINKS
            },
        },
        "timeouts": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "bootstrap_s": _SECONDS,
                "waiting_s": _SECONDS,
                "inflight_s": _SECONDS,
                "heartbeat_interval_s": _SECONDS,
                "heartbeat_max_failure": {"type": "integer", "minimum": 1},
                "disconnect_poll_s": _SECONDS,
            },
        },
        "router": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "request_timeout_s": _SECONDS,
                "cb_timeout_s": _SECONDS,
                "max_retries": {"type": "integer", "minimum": 1},
            },
        },
        "bounds": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                k: _SECONDS
                for k in ("slack_s", "forward_s", "recovery_s", "restart_s", "startup_timeout_s", "command_timeout_s")
            },
        },
    },
}


def _where(error: Any) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "(top level)"


def load_stack_file(path: Path) -> dict[str, Any]:
    """The parsed, validated stack file; ConfigError naming the file and field otherwise."""
    import jsonschema

    try:
        raw: dict[str, Any] = yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"stack file {path} not found") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"stack file {path} is not valid YAML: {exc}".replace("\n", " ")) from exc
    validator = jsonschema.Draft202012Validator(SCHEMA)
    errors = sorted(validator.iter_errors(raw), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ConfigError(f"stack file {path}: {_where(first)}: {first.message}{more}")
    links = set(raw.get("proxies", {}))
    if links and "toxiproxy" not in raw["endpoints"]:
        raise ConfigError(
            f"stack file {path}: endpoints.toxiproxy: required when proxies are listed ({', '.join(sorted(links))})"
        )
    both = set(raw.get("links", {})) & links
    if both:
        raise ConfigError(
            f"stack file {path}: links.{sorted(both)[0]}: the link is also a Toxiproxy proxy; break it one way"
        )
    return raw


_TIMEOUTS = (
    "bootstrap_s",
    "waiting_s",
    "inflight_s",
    "heartbeat_interval_s",
    "heartbeat_max_failure",
    "disconnect_poll_s",
)


def describe(info: StackInfo, pdchaos: str, *, links: tuple[str, ...] = ()) -> dict[str, Any]:
    """The stack file of a stack pd-chaos started, written as its operator would write one
    (``pdchaos stack-file``): its endpoints and proxies, each service's commands as
    ``pdchaos svc`` calls and each link in ``links`` as ``pdchaos link`` calls, on its state
    folder. Attached with it, the stack is driven only through the file, as a deployment
    pd-chaos did not start would be: the worked example of ``--target attach``."""
    cli = f"{shlex.quote(pdchaos)} --state-dir {shlex.quote(info.state_dir)}"
    services = {
        name: {action: f"{cli} svc {action} {name}" for action in SVC_ACTIONS}
        for name in ("prefill", "decode", "router")
    }
    described_links = {
        link: {
            action: f"{cli} link {link} {action}" + (" --rate-kbit {rate_kbit}" if action == "crawl" else "")
            for action in LINK_COMMANDS
        }
        for link in links
    }
    c = info.config
    return {
        "name": f"{info.kind}-{info.port_base}",
        "endpoints": {k: v for k, v in info.endpoints.items() if k in SCHEMA["properties"]["endpoints"]["properties"]},
        "proxies": info.proxies,
        "services": services,
        **({"links": described_links} if described_links else {}),
        "timeouts": {k: c["timeouts"][k] for k in _TIMEOUTS if k != "inflight_s" or c.get("inflight_watchdog")},
        "router": {
            "request_timeout_s": c["router_request_timeout_s"],
            "cb_timeout_s": c["router_cb_timeout_s"],
            "max_retries": c["router_max_retries"],
        },
        "bounds": {k: c[k] for k in ("slack_s", "forward_s", "recovery_s", "restart_s", "startup_timeout_s")},
    }
