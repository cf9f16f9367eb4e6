"""pdsim refuses what SGLang 0.5.23 refuses, worded as SGLang words it: its sampling checks
(``SamplingParams.verify``) and its context checks (``TokenizerManager._validate_one_request``),
each message as measured on sglang-cpu (suites/test_hostile_input.py, 2026-12-07)."""

from __future__ import annotations

from typing import Any

import pytest

from pdsim.request import BadRequest, Endpoint, parse_request

CONTEXT = 64


def _parse(endpoint: Endpoint, body: dict[str, Any]) -> None:
    parse_request(endpoint, body, model="pdsim/deterministic-1", truncate_to=None, context_len=CONTEXT)


def _chat(**fields: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 2, **fields}


def _generate(**params: Any) -> dict[str, Any]:
    return {"text": "hello", "sampling_params": {"max_new_tokens": 2, **params}}


@pytest.mark.parametrize(
    ("endpoint", "body", "said"),
    [
        (Endpoint.GENERATE, _generate(top_k=0), "top_k must be -1 (disable) or at least 1, got 0."),
        (Endpoint.CHAT, _chat(temperature=-1), "temperature must be a non-negative finite number, got -1.0."),
        (Endpoint.GENERATE, _generate(top_p=1.5), "top_p must be in (0, 1], got 1.5."),
        (Endpoint.GENERATE, _generate(max_new_tokens=-1), "max_new_tokens must be at least 0, got -1."),
        (Endpoint.CHAT, _chat(max_tokens=10**9), "Requested token count exceeds the model's maximum context length of 64"),
        (Endpoint.CHAT, _chat(messages=[{"role": "user", "content": "word " * 100}]), "is longer than the model's context length (64 tokens)."),
    ],
)  # fmt: skip
def test_what_sglang_refuses_pdsim_refuses(endpoint, body, said):
    with pytest.raises(BadRequest) as refused:
        _parse(endpoint, body)
    assert said in str(refused.value)


def test_what_sglang_serves_pdsim_parses():
    _parse(Endpoint.GENERATE, _generate(top_k=0, temperature=0))  # greedy sets top_k to 1 first
    _parse(Endpoint.GENERATE, _generate(top_k=-1, top_p=1.0))
    _parse(Endpoint.CHAT, {"messages": [{"role": "user", "content": "word " * 40}]})  # no tokens asked: no total check


def test_context_length_is_sglangs_flag_and_defaults_to_the_token_pool():
    """``--context-length`` bounds the requests an engine takes (a stack sets it on one kind
    to make the engines disagree); without it, the pool's size, as before."""
    from pdsim.config import config_from_args

    base = ["--mode", "decode", "--port", "1", "--kv-port", "2"]
    assert config_from_args(base).context_len == 32768
    assert config_from_args([*base, "--context-length", "256"]).context_len == 256
