"""KVPoll states and the per-room status with SGLang's update rule."""

from __future__ import annotations

import enum

__all__ = ["KVPoll", "KVTransferError", "RoomStatus"]


class KVPoll(enum.IntEnum):
    """SGLang's ``disaggregation/base/conn.py`` values."""

    Failed = 0
    Bootstrapping = 1
    WaitingForInput = 2
    Transferring = 3
    Success = 4


class KVTransferError(Exception):
    """Same string form as SGLang's, which clients and logs match on."""

    def __init__(self, bootstrap_room: int, reason: str) -> None:
        super().__init__(reason)
        self.bootstrap_room = bootstrap_room
        self.reason = reason

    def __str__(self) -> str:
        return f"KVTransferError(bootstrap_room={self.bootstrap_room}): {self.reason}"


class RoomStatus:
    """Monotonic status: it only moves forward, except that Failed always wins."""

    def __init__(self, room: int, initial: KVPoll = KVPoll.Bootstrapping) -> None:
        self.room = room
        self.poll = initial
        self.reason: str | None = None
        self.told = True  # whether the failure is the kind the peer hears of (SGLang's hooks' are not)

    def update(self, new: KVPoll) -> None:
        if self.poll is KVPoll.Failed:
            return
        if new is KVPoll.Failed or new > self.poll:
            self.poll = new

    def fail(self, reason: str | None, *, told: bool = True) -> None:
        """Failed, for ``reason`` (None: no reason recorded, as a poll SGLang's failure hook
        turned). ``told``: the engine tells the peer, where its protocol does."""
        if self.poll is KVPoll.Failed:
            return
        self.reason = reason
        self.told = told
        self.poll = KVPoll.Failed

    def error(self) -> KVTransferError:
        return KVTransferError(self.room, self.reason or "Failed due to an unknown reason from another rank")
