"""pdsim's HTTP API answers in SGLang's shapes, directly and through smg and client_router."""

from __future__ import annotations

import httpx
import pytest

from tests.pdpair import send

MODEL = "pdsim/deterministic-1"


@pytest.mark.parametrize("engine", ["prefill", "decode"])
def test_info_endpoints_have_sglang_shape(stack, engine):
    base = stack.info.endpoints[engine]
    for path in ("/health", "/health_generate"):
        assert httpx.get(base + path, timeout=5).status_code == 200
    models = httpx.get(base + "/v1/models", timeout=5).json()
    assert models["object"] == "list" and models["data"][0]["owned_by"] == "sglang"
    for path in ("/server_info", "/get_server_info"):
        info = httpx.get(base + path, timeout=5).json()
        assert info["disaggregation_mode"] == engine
        assert {
            "model_path",
            "served_model_name",
            "tokenizer_path",
            "disaggregation_bootstrap_port",
            "tp_size",
            "dp_size",
            "max_running_requests",
            "version",
        } <= info.keys()
    for path in ("/model_info", "/get_model_info"):
        info = httpx.get(base + path, timeout=5).json()
        assert info["is_generation"] is True and info["model_path"] == MODEL
    loads = httpx.get(base + "/v1/loads", timeout=5).json()
    assert (
        loads["dp_rank_count"] == 1
        and {"num_running_reqs", "num_waiting_reqs", "token_usage", "max_running_requests"} <= loads["loads"][0].keys()
    )
    assert "sglang:num_running_reqs" in httpx.get(base + "/metrics", timeout=5).text
    r = httpx.post(base + "/abort_request", json={"rid": "nothing-matches"}, timeout=5)
    assert r.status_code == 200 and r.text == ""
    # SGLang flushes only a fully idle engine (400 otherwise): wait out any room an earlier
    # test left to time out, then the idle engine must answer 200
    from chaos.system.wait import wait_until

    wait_until(
        lambda: httpx.get(base + "/flush_cache", timeout=5).status_code == 200,
        timeout_s=stack.info.config["timeouts"]["waiting_s"] + 2,
        what=f"{engine} idle and flushed",
    )


@pytest.mark.parametrize("engine", ["prefill", "decode"])
def test_request_without_bootstrap_room_is_400_with_sglang_message(stack, engine):
    r = httpx.post(stack.info.endpoints[engine] + "/generate", json={"text": "hi", "rid": "r-no-room"}, timeout=5)
    assert r.status_code == 400
    assert (
        r.json()["error"]["message"]
        == "Invalid request: Disaggregated request received without bootstrap room id. req.rid='r-no-room'"
    )


def test_too_long_prompt_is_400(stack):
    legs = send(stack, "/generate", {"input_ids": [5] * 40000, "rid": "r-long"}, legs=("prefill",))
    assert legs["prefill"].status == 400
    assert "The input (40000 tokens) is longer than the model's context length (32768 tokens)." in legs["prefill"].text


def test_bootstrap_server_routes(stack):
    base = stack.info.endpoints["prefill_bootstrap"]
    assert httpx.get(base + "/health", timeout=5).text == "OK"
    q = {"prefill_dp_rank": -1, "prefill_cp_rank": -1, "target_tp_rank": -1, "target_pp_rank": -1}
    info = httpx.get(base + "/route", params=q, timeout=5).json()
    assert info["attn_tp_size"] == 1 and info["follow_bootstrap_room"] is True
    rank = httpx.get(base + "/route", params=dict.fromkeys(q, 0), timeout=5).json()
    assert rank["rank_port"] == int(stack.info.proxies["control"]["listen"].rpartition(":")[2])
    assert httpx.get(base + "/route", params={"prefill_dp_rank": 0}, timeout=5).status_code == 400


def test_prefill_answers_first_token_after_transfer_and_decode_continues(stack):
    legs = send(
        stack,
        "/generate",
        {"text": "the quick brown fox", "sampling_params": {"max_new_tokens": 6, "ignore_eos": True}},
    )
    p, d = legs["prefill"], legs["decode"]
    assert p.status == 200 and d.status == 200
    assert p.body["meta_info"]["finish_reason"] == {"type": "length", "length": 0}
    assert p.body["meta_info"]["completion_tokens"] == 1
    assert d.body["output_ids"][0] == p.body["output_ids"][0]
    assert d.body["meta_info"]["finish_reason"] == {"type": "length", "length": 6}
    assert len(d.body["output_ids"]) == 6


def _client(stack) -> httpx.Client:
    return httpx.Client(base_url=stack.info.endpoints["client"], timeout=httpx.Timeout(20, connect=2))


def _sse(lines: list[str]) -> list[str]:
    return [ln[len("data: ") :] for ln in lines if ln.startswith("data: ")]


def test_generate_non_stream_and_stream_through_client_router(stack):
    body = {
        "text": "tell me about fjords",
        "sampling_params": {"max_new_tokens": 5, "ignore_eos": True, "temperature": 0},
    }
    with _client(stack) as c:
        one = c.post("/generate", json=body).json()
        assert one["meta_info"]["completion_tokens"] == 5 and one["text"]
        with c.stream("POST", "/generate", json={**body, "stream": True}) as r:
            events = _sse(list(r.iter_lines()))
    assert events[-1] == "[DONE]"
    import json

    last = json.loads(events[-2])
    assert last["text"] == one["text"]  # cumulative text, same context -> same reply
    assert last["meta_info"]["finish_reason"]["type"] == "length"


def test_chat_non_stream_and_stream_with_usage_through_client_router(stack):
    import json

    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": 4,
        "ignore_eos": True,
        "temperature": 0,
    }
    with _client(stack) as c:
        one = c.post("/v1/chat/completions", json=body).json()
        assert one["object"] == "chat.completion"
        assert one["usage"]["completion_tokens"] == 4 and one["usage"]["prompt_tokens"] > 0
        with c.stream(
            "POST", "/v1/chat/completions", json={**body, "stream": True, "stream_options": {"include_usage": True}}
        ) as r:
            events = _sse(list(r.iter_lines()))
    chunks = [json.loads(e) for e in events[:-1]]
    assert events[-1] == "[DONE]"
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(ch["choices"][0]["delta"].get("content", "") for ch in chunks if ch["choices"])
    assert text == one["choices"][0]["message"]["content"]
    assert chunks[-1]["usage"] == one["usage"]
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"


def test_completions_non_stream_and_stream(stack):
    import json

    body = {"model": MODEL, "prompt": "once upon a time", "max_tokens": 3, "ignore_eos": True, "temperature": 0}
    with _client(stack) as c:
        one = c.post("/v1/completions", json=body).json()
        assert one["object"] == "text_completion" and one["usage"]["completion_tokens"] == 3
        with c.stream("POST", "/v1/completions", json={**body, "stream": True}) as r:
            events = _sse(list(r.iter_lines()))
    text = "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1])
    assert text == one["choices"][0]["text"]


def test_replies_are_a_function_of_the_context(stack):
    """Greedy (temperature 0) replies depend on the context alone. Without temperature 0
    pdsim samples as SGLang does: the same context gives another reply, unless the request
    names a seed."""

    def ask(content: str, **sampling: object) -> str:
        body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": content}],
            "max_tokens": 8,
            "ignore_eos": True,
            **sampling,
        }
        with _client(stack) as c:
            return c.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]["content"]

    assert ask("alpha beta", temperature=0) == ask("alpha beta", temperature=0)
    assert ask("alpha beta", temperature=0) != ask("alpha gamma", temperature=0)
    assert len({ask("alpha beta") for _ in range(3)}) > 1
    assert ask("alpha beta", temperature=0.7, seed=5) == ask("alpha beta", temperature=0.7, seed=5)


def test_stop_and_max_tokens(stack):
    with _client(stack) as c:
        full = c.post(
            "/generate",
            json={"text": "stop test", "sampling_params": {"max_new_tokens": 8, "ignore_eos": True, "temperature": 0}},
        ).json()
        words = full["text"].split()
        cut = c.post(
            "/generate",
            json={
                "text": "stop test",
                "sampling_params": {"max_new_tokens": 8, "ignore_eos": True, "temperature": 0, "stop": [words[2]]},
            },
        ).json()
    assert cut["meta_info"]["finish_reason"] == {"type": "stop", "matched": words[2]}
    # the text ends right before the stop string, as SGLang's trim_matched_stop cuts it
    assert cut["text"] == full["text"][: full["text"].find(words[2])]


def test_extra_fields_from_smg_are_accepted(stack):
    legs = send(
        stack,
        "/generate",
        {
            "text": "x",
            "sampling_params": {"max_new_tokens": 1},
            "return_text_in_logprobs": False,
            "log_metrics": True,
            "background": False,
            "model": "unknown",
        },
    )
    assert legs["decode"].status == 200


def test_a_room_decode_aborts_mid_forward_leaves_prefills_batch_between_chunks(stack):
    """Prefill forwards in steps of ``prefill_chunk_tokens`` (SGLang's chunked prefill); a room
    decode aborts meanwhile leaves at the next step, its KV freed, instead of holding it
    until its whole forward is done (9000 words: 9 s at the stack's 1 ms a token)."""
    import threading
    import time

    from chaos.system.wait import wait_until
    from tests.pdpair import gauge

    body = {"text": "word " * 9000, "sampling_params": {"max_new_tokens": 2}}
    leg = threading.Thread(target=send, args=(stack, "/generate", body), kwargs={"timeout_s": 20}, daemon=True)
    leg.start()
    wait_until(lambda: gauge(stack, "prefill", "num_running_reqs") == 1, timeout_s=5, what="prefill forwarding it")
    aborted = time.monotonic()
    httpx.post(stack.info.endpoints["decode"] + "/abort_request", json={"abort_all": True}, timeout=5)
    wait_until(lambda: gauge(stack, "prefill", "num_used_tokens") == 0, timeout_s=6, what="prefill freed the room")
    freed_s = time.monotonic() - aborted
    leg.join(timeout=20)
    step_s = 2048 * 0.001  # one step of the stack's prefill: the longest an aborted room waits
    assert freed_s < step_s + 1.0, f"prefill held the aborted room {freed_s:.1f}s"


def test_a_reply_ended_by_its_end_of_sequence_counts_that_token(stack):
    """As SGLang 0.5.23 (``Req._check_token_based_finish`` sets ``finished_len`` to the
    matched token's position plus one, and the reply's count is ``output_ids_through_stop``):
    the end-of-sequence token is counted among the reply's tokens; it has no text."""
    with _client(stack) as c:
        ended = c.post(
            "/generate",
            json={"text": "an ending", "sampling_params": {"max_new_tokens": 400, "temperature": 0}},
        ).json()
    assert ended["meta_info"]["finish_reason"] == {"type": "stop", "matched": 0}, ended["meta_info"]
    assert ended["meta_info"]["completion_tokens"] == len(ended["text"].split()) + 1
