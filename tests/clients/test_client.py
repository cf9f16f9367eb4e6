"""``chaos.clients.client``, judged on histories written by hand."""

from __future__ import annotations

from chaos.clients.client import asked_of


def test_what_a_request_asked_of_its_end_is_read_from_each_endpoints_body():
    assert asked_of({"max_tokens": 8, "ignore_eos": True}) == dict(max_tokens=8, ignore_eos=True, stops=False)
    assert asked_of({"max_completion_tokens": 4, "stop": ["\n"]})["stops"] is True
    native = {"text": "hi", "sampling_params": {"max_new_tokens": 16, "stop_token_ids": [2]}}
    assert asked_of(native) == dict(max_tokens=16, ignore_eos=False, stops=True)
