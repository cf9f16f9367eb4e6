"""``chaos.clients.client``, judged on histories written by hand."""

from __future__ import annotations

from chaos.clients.client import asked_of


def test_what_a_request_asked_of_its_end_is_read_from_each_endpoints_body():
    assert asked_of({"max_tokens": 8, "ignore_eos": True}) == dict(max_tokens=8, ignore_eos=True, stops=False)
    assert asked_of({"max_completion_tokens": 4, "stop": ["\n"]})["stops"] is True
    native = {"text": "hi", "sampling_params": {"max_new_tokens": 16, "stop_token_ids": [2]}}
    assert asked_of(native) == dict(max_tokens=16, ignore_eos=False, stops=True)


def test_a_stop_string_read_off_a_reply_is_where_it_first_appears():
    from chaos.clients.workloads import stop_string_in

    reply = " oak elm oak fir"
    assert stop_string_in(reply, after=9, length=3) == "k f"  # "oak" was seen before, "ak " ends in a space
    assert stop_string_in(reply, after=12, length=3) == "fir"  # " fi" begins with one
    assert stop_string_in(reply, after=1, length=3) == "oak"
    assert stop_string_in(reply, after=14, length=3) is None  # too short past there
