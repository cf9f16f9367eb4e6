"""The official openai client as a workload client: every ending is exactly one outcome,
recorded like the rig's own client's, and its deadline holds against a silent server."""

from __future__ import annotations

import time

import pytest

from chaos.clients.client import Deadlines
from chaos.clients.openai_client import OpenAIClient
from chaos.observe.history import History
from chaos.observe.records import Chunk, Outcome


@pytest.mark.parametrize("stream", [True, False])
def test_a_reply_is_ok_and_recorded(stack, workload, history, stream):
    client = OpenAIClient(stack.info.endpoints["client"], history, Deadlines(), model=workload.model)
    try:
        reply = client.chat("hello", max_tokens=4, stream=stream)
    finally:
        client.close()
    assert reply.outcome is Outcome.OK and reply.reply and reply.completion_tokens == 4, reply
    assert [op.invoke.op for op in history.ops()] == [reply.op]
    assert any(isinstance(r, Chunk) for r in history.records) == stream


def test_a_refused_request_is_a_clean_error_with_its_status(stack, workload, history):
    client = OpenAIClient(stack.info.endpoints["client"], history, Deadlines(), model=workload.model)
    try:
        reply = client.chat("word " * 70_000, max_tokens=2, stream=True)
    finally:
        client.close()
    assert reply.outcome is Outcome.CLEAN_ERROR and reply.status == 400, reply


def test_its_deadline_holds_against_a_server_that_never_answers(silent_server):
    client = OpenAIClient(silent_server, History(), Deadlines(read_s=60, stall_s=60, total_s=1.5), model="m")
    t0 = time.monotonic()
    try:
        reply = client.chat("hello?", max_tokens=2, stream=True)
    finally:
        client.close()
    took = time.monotonic() - t0
    assert reply.outcome is Outcome.CLIENT_TIMEOUT, reply
    assert 1.5 <= took < 3.0, took
