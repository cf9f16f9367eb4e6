"""SGLang's failure hooks, applied where SGLang 0.5.23 applies them.

``SGLANG_TEST_DISAGG_FAILURE_PROB`` (``disaggregation/utils.py``,
``_poll_with_failure_injection``): each poll of a room, in any PD queue of either engine,
reads Failed at the hook's chance. The room's transfer itself never failed, so the scheduler
finds no recorded reason ("Failed due to an unknown reason from another rank"), aborts the
request with a 500 and counts the failure, and tells the peer nothing: the other engine holds
its leg of the room until its own timeout, or until the transfer it was making ends.

``SGLANG_TEST_DISAGG_KV_CHECKSUM_MISMATCH_PROB`` (``decode.py``, ``_verify_kv_checksums``):
decode's check of a request's KV checksum fails at the hook's chance, where the checksum is on.

pdsim reads the same variables (``pdsim.config``), so one environment fails both targets alike.
"""

from __future__ import annotations

import itertools
import random
from typing import Iterable, Protocol

from pdsim.kvpoll import KVPoll, RoomStatus

__all__ = ["Chance", "PollFailures"]


class _Polled(Protocol):
    status: RoomStatus
    leaked: bool


class Chance:
    """A hook's chance, drawn from a generator of its own."""

    def __init__(self, prob: float, seed: int | None = None) -> None:
        self.prob = prob
        self._rng = random.Random(seed)

    def hits(self) -> bool:
        return self.prob > 0 and self._rng.random() < self.prob


class PollFailures(Chance):
    """``SGLANG_TEST_DISAGG_FAILURE_PROB``: one scheduler step's polls of a queue's rooms."""

    def __init__(self, prob: float, seed: int | None = None) -> None:
        super().__init__(prob, seed)
        self.failed = 0  # rooms this hook failed since the engine started

    def poll(self, *queues: Iterable[_Polled]) -> None:
        """Fail each room of ``queues`` polled now at the hook's chance, as a failure of this
        engine alone: the peer is not told (``RoomStatus.fail(told=False)``). A room already
        failed, or one no queue step looks at any more (leaked), is not polled."""
        if self.prob <= 0:
            return
        for room in itertools.chain(*queues):
            if room.leaked or room.status.poll is KVPoll.Failed or not self.hits():
                continue
            room.status.fail(None, told=False)
            self.failed += 1
