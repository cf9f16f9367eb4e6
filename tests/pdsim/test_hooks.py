"""SGLang's failure hooks in pdsim: where they fail rooms, and what each engine then does.

The hooks' variables are SGLang's own (``SGLANG_TEST_DISAGG_FAILURE_PROB``,
``SGLANG_TEST_DISAGG_KV_CHECKSUM_MISMATCH_PROB``), set in the engines' environment by the
stack (``chaos.targets.stack.FailureHooks``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pytest

from chaos.errors import ConfigError, FaultNotApplied
from chaos.faults.hooks import EngineHooks
from chaos.targets.stack import FailureHooks
from pdsim.hooks import Chance, PollFailures
from pdsim.kvpoll import KVPoll, RoomStatus
from tests.pdpair import gauge, send

BODY = {"text": "a hooked request", "sampling_params": {"max_new_tokens": 4}}
UNKNOWN = "Failed due to an unknown reason from another rank"


@dataclass
class Room:
    status: RoomStatus = field(default_factory=lambda: RoomStatus(1))
    leaked: bool = False


def test_a_poll_hook_fails_rooms_at_its_chance_untold():
    hook = PollFailures(0.3, seed=7)
    rooms = [Room() for _ in range(1000)]
    hook.poll(rooms)
    failed = [r for r in rooms if r.status.poll is KVPoll.Failed]
    assert 250 <= len(failed) <= 350 and hook.failed == len(failed)
    assert all(not r.status.told and str(r.status.error()).endswith(UNKNOWN) for r in failed)


def test_a_poll_hook_leaves_failed_and_leaked_rooms_alone():
    hook = PollFailures(1.0)
    told, leaked = Room(), Room(leaked=True)
    told.status.fail("Aborted by AbortReq.")
    hook.poll([told, leaked])
    assert told.status.told and told.status.reason == "Aborted by AbortReq."
    assert leaked.status.poll is KVPoll.Bootstrapping and hook.failed == 0


def test_a_hook_at_zero_never_hits():
    assert not any(Chance(0.0, seed=1).hits() for _ in range(1000))


def test_hooks_are_probabilities_and_only_the_set_ones_reach_the_engines():
    assert FailureHooks(poll_failure_prob=0.5).to_env() == {"SGLANG_TEST_DISAGG_FAILURE_PROB": "0.5"}
    assert not FailureHooks() and FailureHooks().to_env() == {}
    with pytest.raises(ConfigError, match="not a probability"):
        FailureHooks(kv_checksum_mismatch_prob=1.5)


@pytest.fixture
def hooked(stack_factory):
    """A stack whose engines fail every room at its first poll (no warm-up: none could succeed)."""
    s = stack_factory.start(hooks=FailureHooks(poll_failure_prob=1.0), warm_up_words=())
    yield s
    stack_factory.stop(s)


def test_every_room_fails_at_its_first_poll_with_sglangs_words(hooked):
    """Prefill fails its leg in the bootstrap queue, decode its own in the prealloc queue,
    each with SGLang's message for a failure with no recorded reason, and counts it."""
    legs = send(hooked, "/generate", {**BODY, "rid": "r-hooked"}, room=31, timeout_s=10)
    prefill, decode = legs["prefill"], legs["decode"]
    assert prefill.status == decode.status == 500, legs
    assert re.fullmatch(
        rf"Prefill bootstrap failed for request rank=0 req.rid='r-hooked' req.bootstrap_room=31 with exception "
        rf"KVTransferError\(bootstrap_room=31\): {UNKNOWN}",
        prefill.body["message"],
    ), prefill.body["message"]
    assert decode.body["message"].startswith("Decode handshake failed for request rank=0"), decode.body["message"]
    assert gauge(hooked, "prefill", "num_bootstrap_failed_reqs_total") >= 1
    assert gauge(hooked, "decode", "num_bootstrap_failed_reqs_total") >= 1


def test_the_hooks_fault_proves_them_in_each_engines_environment(hooked, stack):
    assert "SGLANG_TEST_DISAGG_FAILURE_PROB in the environment of prefill pid" in EngineHooks(hooked).verify()
    with pytest.raises(FaultNotApplied, match="without SGLang's failure hooks"):
        EngineHooks(stack).verify()


def test_a_checksum_hook_fails_the_check_only_where_the_checksum_is_on(stack_factory):
    """With the checksum on, decode's check fails at the hook's chance (here every time) and
    the room fails as a mismatch; with it off the hook has nothing to fail."""
    hooks = FailureHooks(kv_checksum_mismatch_prob=1.0)
    for checksum in (True, False):
        s = stack_factory.start(hooks=hooks, kv_checksum=checksum, warm_up_words=())
        try:
            legs = send(s, "/generate", BODY, timeout_s=10)
        finally:
            stack_factory.stop(s)
        if checksum:
            assert legs["decode"].status == 500 and "KV checksum mismatch" in legs["decode"].body["message"], legs
        else:
            assert legs["decode"].status == 200, legs
