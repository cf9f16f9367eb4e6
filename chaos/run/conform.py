"""Differential conformance: send pdsim and real SGLang the same probes, diff what a suite
would observe.

pdsim must be at least as strict as the engine it stands in for: a suite tuned on a kinder
engine breaks on the real one. Each probe reduces one observable behaviour to a short
string (a status, a metric's type and labels, a message with its numbers and ids masked,
whether a timing holds), so two stacks can be compared line by line:

* endpoints: ``/health`` (status, and whether it takes the generation's second),
  ``/v1/models``, ``/v1/loads``; a request without a bootstrap room;
* metrics the suites read: type and label names, or absent, on a stack that served only
  the warm-up (SGLang creates its failure counters at their first increment);
* a bootstrap timeout (a prefill leg whose decode never comes): status, message, when it
  fires, and the failure counter it creates; streamed, the error event's shape; and a
  waiting timeout (a decode leg whose prefill never comes), alike;
* an abort: how a chat stream decode is running ends when decode's ``/abort_request``
  aborts it (a last chunk, or an error event);
* sampling: whether two requests without ``temperature`` get the same reply (SGLang
  samples), and with ``temperature: 0`` (greedy);
* endings: a stop string read off a greedy reply (the text cut before it, or ending with
  it; the finish reason), and a reply asked for one token (its count);
* cadence: what ``/v1/loads`` and ``/metrics`` say of a room that waits in decode while
  decode runs no batch.

``INTENDED`` lists the differences that are meant, each with its reason; ``pdchaos
conform`` and ``tests/targets/test_sglang_cpu.py`` fail on any other.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from chaos.clients.workloads import stop_string_in
from chaos.observe.sampler import parse_metrics
from chaos.system.wait import wait_until
from chaos.targets.bringup import served_model
from chaos.targets.stack import LOADS_PATH, StackInfo

__all__ = ["INTENDED", "Row", "diff", "observe"]

_TIMEOUT = httpx.Timeout(20.0, connect=2.0)
WATCHED = (
    "num_running_reqs", "num_queue_reqs", "num_used_tokens", "token_usage",
    "num_prefill_bootstrap_queue_reqs", "num_prefill_inflight_queue_reqs",
    "num_decode_prealloc_queue_reqs", "num_decode_transfer_queue_reqs",
    "num_bootstrap_failed_reqs_total", "num_transfer_failed_reqs_total",
    "num_requests_total", "num_aborted_requests_total", "prompt_tokens_total", "generation_tokens_total",
    "time_to_first_token_seconds_count", "e2e_request_latency_seconds_count", "inter_token_latency_seconds_count",
)  # fmt: skip
LOADS = (
    "num_running_reqs",
    "num_prefill_bootstrap_queue_reqs",
    "num_prefill_inflight_queue_reqs",
    "num_decode_prealloc_queue_reqs",
    "num_decode_transfer_queue_reqs",
)

# probe -> why pdsim is meant to differ there
INTENDED: dict[str, str] = {
    "cadence.decode_queue_while_no_batch_runs": (
        "pdsim's /metrics queue gauges follow the queues at every tick; SGLang 0.5.23 sets them "
        "only when it reports a batch, so a room waiting while decode runs nothing reads 0 there. "
        "No verdict reads them where /v1/loads exists: the sampler lets the live counts win on both"
    ),
}


@dataclass(frozen=True)
class Row:
    probe: str
    base: str
    other: str
    intended: str  # the reason, when the difference is meant; "" otherwise

    @property
    def differs(self) -> bool:
        return self.base != self.other


def mask(text: str) -> str:
    """A message with what varies per request masked: quoted ids, hex ids, numbers."""
    text = re.sub(r"'[^']*'", "'…'", text)
    text = re.sub(r"\b[0-9a-f]{16,}\b", "ID", text)
    return re.sub(r"\d+(\.\d+)?", "N", text)


def _shape(obj: Any) -> str:
    """The keys of a JSON object, nested, with the values' types: what a client parses."""
    if isinstance(obj, dict):
        return "{" + ",".join(f"{k}:{_shape(v)}" for k, v in sorted(obj.items())) + "}"
    if isinstance(obj, list):
        return "[" + (_shape(obj[0]) if obj else "") + "]"
    return type(obj).__name__


def _event_shape(event: dict[str, Any]) -> str:
    """What a streaming client reads of an event: its top-level keys, and how it ended
    (SGLang's meta_info also carries a dozen timings no client needs)."""
    finish = (event.get("meta_info") or {}).get("finish_reason")
    return f"{_shape({k: None for k in event})} finish_reason={_shape(finish)}"


def _metrics(url: str) -> dict[str, str]:
    """sample name (without ``sglang:``) -> "type labels" for the watched metrics."""
    out = {}
    for fam in text_string_to_metric_families(httpx.get(url, timeout=5.0).text):
        for s in fam.samples:
            name = s.name.removeprefix("sglang:")
            if name in WATCHED and name not in out:
                out[name] = f"{fam.type} {','.join(sorted(s.labels))}"
    return out


def _lone_leg(info: StackInfo, text: str) -> dict[str, Any]:
    """A /generate body for one leg of a PD request whose other leg never comes: the PD
    fields point at the stack's prefill bootstrap server, with a fresh room."""
    port = int(info.endpoints["prefill_bootstrap"].rsplit(":", 1)[1])
    return {"text": text, "sampling_params": {"max_new_tokens": 2, "temperature": 0},
            "bootstrap_host": "127.0.0.1", "bootstrap_port": port, "bootstrap_room": uuid.uuid4().int % (1 << 62)}  # fmt: skip


def _bootstrap_timeout(info: StackInfo, *, stream: bool) -> dict[str, str]:
    """A prefill leg whose decode never comes: it must fail after the bootstrap timeout."""
    bootstrap_s = float(info.config["timeouts"]["bootstrap_s"])
    body = _lone_leg(info, "a lone prefill leg") | {"stream": stream}
    t0 = time.monotonic()
    with httpx.stream(
        "POST", info.endpoints["prefill"] + "/generate", json=body, timeout=httpx.Timeout(bootstrap_s + 15, connect=2.0)
    ) as r:
        text = "".join(r.iter_text())
        status = r.status_code
    took = time.monotonic() - t0
    kind = "stream" if stream else "plain"
    out = {
        f"bootstrap_timeout.{kind}.status": str(status),
        f"bootstrap_timeout.{kind}.fires_in_bound": str(bootstrap_s <= took <= bootstrap_s + 2.0),
    }
    if stream:
        events = [ln[len("data: ") :] for ln in text.splitlines() if ln.startswith("data: ")]
        out["bootstrap_timeout.stream.events"] = " ".join(
            "[DONE]" if e == "[DONE]" else _event_shape(json.loads(e)) for e in events
        )
    else:
        try:
            reply = json.loads(text)
        except ValueError:
            reply = {"raw": text}
        out["bootstrap_timeout.plain.body"] = _shape(reply)
        out["bootstrap_timeout.plain.message"] = mask(str(reply.get("message", reply.get("error", ""))))[:300]
    return out


def _waiting_timeout(info: StackInfo) -> dict[str, str]:
    """A decode leg whose prefill twin never comes: decode must give up on the KV after the
    waiting timeout, with a 500 and a transfer-failure count."""
    waiting_s = float(info.config["timeouts"]["waiting_s"])
    body = _lone_leg(info, "a lone decode leg")
    decode = info.endpoints["decode"]

    def waiting(url: str) -> float:
        values = parse_metrics(httpx.get(url, timeout=5.0).text)
        return values.get("num_decode_prealloc_queue_reqs", 0.0) + values.get("num_decode_transfer_queue_reqs", 0.0)

    t0 = time.monotonic()
    with ThreadPoolExecutor(1) as pool:
        leg = pool.submit(
            httpx.post, decode + "/generate", json=body, timeout=httpx.Timeout(waiting_s + 15, connect=2.0)
        )
        # while the room waits and decode runs no batch: what /v1/loads and /metrics say of it
        live = wait_until(
            lambda: waiting(decode + LOADS_PATH),
            timeout_s=min(4.0, waiting_s - 1),
            what="decode's /v1/loads shows the waiting room",
        )
        cadence = f"loads {live:g}, metrics {waiting(decode + '/metrics'):g}"
        reply = leg.result(timeout=waiting_s + 20)
    took = time.monotonic() - t0
    try:
        message = str(reply.json().get("message", ""))
    except ValueError:
        message = reply.text
    return {
        "waiting_timeout.status": str(reply.status_code),
        "cadence.decode_queue_while_no_batch_runs": cadence,
        "waiting_timeout.fires_in_bound": str(waiting_s <= took <= waiting_s + 2.0),
        "waiting_timeout.message": mask(message)[:300],
        "metrics.decode.num_transfer_failed_reqs_total.after_a_failure": _metrics(decode + "/metrics").get(
            "num_transfer_failed_reqs_total", "absent"
        ),
    }


def _stream_ending(data: str) -> str:
    """How one SSE data line reads to a client at the end of a stream."""
    if data == "[DONE]":
        return "[DONE]"
    event = json.loads(data)
    if "error" in event:
        return "error event"
    return f"chunk finish_reason={(event.get('choices') or [{}])[0].get('finish_reason')}"


def _abort_running(info: StackInfo) -> dict[str, str]:
    """A chat stream decode is running, aborted through decode's ``/abort_request``: how it
    ends for the client (SGLang 0.5.23: a last chunk saying ``abort``, then ``[DONE]``)."""
    body = {
        "model": served_model(info),
        "messages": [{"role": "user", "content": "a long tale"}],
        "max_tokens": 400,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
    }
    data: list[str] = []
    with httpx.stream("POST", info.endpoints["client"] + "/v1/chat/completions", json=body, timeout=_TIMEOUT) as r:
        lines = r.iter_lines()
        for line in lines:  # until decode is running it: its first token came
            if line.startswith("data: {") and (json.loads(line[6:]).get("choices") or [{}])[0].get("delta", {}).get(
                "content"
            ):
                break
        httpx.post(info.endpoints["decode"] + "/abort_request", json={"abort_all": True}, timeout=_TIMEOUT)
        data = [line[6:] for line in lines if line.startswith("data: ")]
    return {
        "abort.running_stream.status": str(r.status_code),
        "abort.running_stream.ends": " | ".join(_stream_ending(d) for d in data[-2:]),
    }


def _same_reply(client: str, body: dict[str, Any]) -> str:
    replies = {
        httpx.post(client + "/v1/chat/completions", json=body, timeout=_TIMEOUT).json()["choices"][0]["message"][
            "content"
        ]
        for _ in range(3)
    }
    return str(len(replies) == 1)


def _endings(client: str, chat: dict[str, Any]) -> dict[str, str]:
    """How a greedy reply ends at a stop string read off its full reply (two characters
    from its second half, appearing nowhere before), and how many tokens a reply asked for
    one has."""

    def ask(**extra: Any) -> dict[str, Any]:
        body = chat | {"temperature": 0} | extra
        return dict(httpx.post(client + "/v1/chat/completions", json=body, timeout=_TIMEOUT).json())

    full = ask()["choices"][0]["message"]["content"]
    stop = stop_string_in(full, after=len(full) // 2, length=2)
    one = ask(max_tokens=1)
    out = {"endings.max_tokens_1.completion_tokens": str(one["usage"]["completion_tokens"])}
    if stop is None:
        return out | {"endings.stop.text": "no stop string in the reply"}
    cut = ask(stop=[stop])["choices"][0]
    at = full.find(stop)
    said = {full[:at]: "cut before the stop string", full[: at + len(stop)]: "ends with the stop string"}
    return out | {
        "endings.stop.text": said.get(cut["message"]["content"], "other"),
        "endings.stop.finish_reason": str(cut["finish_reason"]),
    }


def observe(info: StackInfo) -> dict[str, str]:
    """Every probe's observation on one stack, which should have served only its warm-up."""
    e = info.endpoints
    out: dict[str, str] = {}
    for role in ("prefill", "decode"):
        for name in WATCHED:
            out[f"metrics.{role}.{name}"] = "absent"
        out.update({f"metrics.{role}.{k}": v for k, v in _metrics(e[role] + "/metrics").items()})
        t0 = time.monotonic()
        health = httpx.get(e[role] + "/health", timeout=_TIMEOUT)
        out[f"health.{role}.status"] = str(health.status_code)
        out[f"health.{role}.takes_a_second"] = str(time.monotonic() - t0 >= 0.9)
        out[f"models.{role}.status"] = str(httpx.get(e[role] + "/v1/models", timeout=_TIMEOUT).status_code)
        loads = httpx.get(e[role] + LOADS_PATH, timeout=_TIMEOUT)
        live = parse_metrics(loads.text) if loads.status_code == 200 else {}
        out[f"loads.{role}"] = f"status {loads.status_code}: " + ",".join(n for n in LOADS if n in live)
        no_room = httpx.post(
            e[role] + "/generate",
            json={"text": "no room", "sampling_params": {"max_new_tokens": 1, "temperature": 0}},
            timeout=_TIMEOUT,
        )
        out[f"no_bootstrap_room.{role}.status"] = str(no_room.status_code)
    out.update(_bootstrap_timeout(info, stream=False))
    out.update(_bootstrap_timeout(info, stream=True))
    out.update(_waiting_timeout(info))
    out.update(_abort_running(info))
    out["metrics.prefill.num_bootstrap_failed_reqs_total.after_a_failure"] = _metrics(e["prefill"] + "/metrics").get(
        "num_bootstrap_failed_reqs_total", "absent"
    )
    chat = {
        "model": served_model(info),
        "messages": [{"role": "user", "content": "the same question"}],
        "max_tokens": 8,
    }
    out["sampling.without_temperature.same_reply"] = _same_reply(e["client"], chat)
    out["sampling.temperature_0.same_reply"] = _same_reply(e["client"], chat | {"temperature": 0})
    out.update(_endings(e["client"], chat))
    return out


def diff(base: dict[str, str], other: dict[str, str], intended: dict[str, str] = INTENDED) -> list[Row]:
    """One row per probe either side observed."""
    return [
        Row(p, base.get(p, "-"), other.get(p, "-"), intended.get(p, "")) for p in sorted(base.keys() | other.keys())
    ]
