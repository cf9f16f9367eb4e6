"""The queue handler: a process that takes each packet an NFQUEUE rule hands it, holds it for a
set delay, may flip a byte of its payload or send it twice, then lets it go on: latency,
jitter and the reordering jitter brings, corruption and duplication, on a packet link.

Toxiproxy delays a link it sits on; real engines pick their KV and control ports at start,
so no proxy sits on those links (``chaos.system.netns``). The kernel's netem qdisc would
delay them, but this project's machines have no netem ("Specified qdisc kind is unknown").
NFQUEUE they have: a rule in the stack's namespace queues the link's packets to userspace,
and this process, started inside that namespace, gives each one its verdict when its time
comes. Each packet is released ``delay_ms`` plus a uniform draw in ``[-jitter_ms,
jitter_ms]`` after it arrived (never before it arrived), in the order of those times, as
netem does: jitter wider than the gap between two packets reorders them. With
``--corrupt-prob``, each packet whose TCP payload is at least ``--corrupt-min-payload``
bytes long has, at that chance, one byte of its payload inverted at a random offset, its
checksum made right again (``chaos.system.tcp_segment``), so the peer's socket reads the
flipped byte: what integrity checks above TCP (SGLang's KV checksum) are for. With
``--duplicate-prob``, each packet handed over whole goes on and, at that chance, a copy of it
(its checksum made whole) is sent again from a raw socket in the namespace when its own hold
(a draw of its own) ends, as netem's duplication does: the peer's TCP must drop it. The copy
comes back through the same rule; the handler knows it by its segment and lets it go on at
once, counted as echoed, so the figures show that the copies reached the link.

It runs until SIGTERM or SIGINT, then lets every packet it still holds go on at once (a
heal loses nothing), and it exits by itself once the process that started it is gone (the
rig crashed), so it never keeps the stack's namespace alive. Its figures (packets, bytes,
the holds it gave, the packets it reordered and corrupted) are written as JSON to ``--stats`` while it
runs and when it stops: the fault's evidence.

Why NetfilterQueue (libnetfilter_queue's binding) and not a hand-written netlink client: it
is the maintained binding, and it lets a packet's verdict be given after its callback
returned, which holding packets needs.
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import json
import os
import random
import select
import signal
import socket
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from chaos.system.tcp_segment import flip_payload_byte, ip_length, payload_span, segment_key, whole, with_checksum

__all__ = ["Corrupt", "Duplicate", "Hold", "Stats", "main"]

_TICK_S = 0.25  # how often, at most, the stats file is rewritten and the parent is checked


@dataclass
class Stats:
    """What the handler did: the fault's evidence."""

    packets: int = 0  # released so far
    bytes: int = 0
    reordered: int = 0  # released before a packet that arrived earlier
    held_ms_min: float | None = None
    held_ms_max: float | None = None
    held_ms_sum: float = 0.0
    released_at_stop: int = 0  # still held at the stop: released at once, in no other figure
    corrupted: int = 0  # packets with a byte flipped
    duplicated: int = 0  # copies sent again
    echoed: int = 0  # copies seen coming back through the rule: they reached the link
    _last_arrival: float = field(default=-1.0, repr=False)

    def released(self, size: int, arrived: float, now: float) -> None:
        held = (now - arrived) * 1000
        self.packets += 1
        self.bytes += size
        self.held_ms_sum += held
        self.held_ms_min = held if self.held_ms_min is None else min(self.held_ms_min, held)
        self.held_ms_max = held if self.held_ms_max is None else max(self.held_ms_max, held)
        if arrived < self._last_arrival:
            self.reordered += 1
        self._last_arrival = max(self._last_arrival, arrived)

    def to_json(self, held_now: int) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if not k.startswith("_")}
        out["held_now"] = held_now
        out["held_ms_mean"] = self.held_ms_sum / self.packets if self.packets else None
        return out


class Hold:
    """When each packet goes on: ``delay_ms`` ± ``jitter_ms`` (uniform) after its arrival,
    drawn from a seeded generator so that a run can be replayed."""

    def __init__(self, delay_ms: float, jitter_ms: float, seed: int) -> None:
        if delay_ms < 0 or jitter_ms < 0:
            raise ValueError(f"a delay and its jitter are at least 0, not {delay_ms} and {jitter_ms}")
        self.delay_s, self.jitter_s = delay_ms / 1000, jitter_ms / 1000
        self._rng = random.Random(seed)

    def release_at(self, arrived: float) -> float:
        return arrived + max(0.0, self.delay_s + self._rng.uniform(-self.jitter_s, self.jitter_s))


class Corrupt:
    """Which packets get a byte flipped, and where: at ``prob``, a packet whose TCP payload
    is at least ``min_payload`` bytes (a link's data, not its acknowledgements or small
    headers), at an offset drawn uniformly in its payload; seeded, so a run can be replayed."""

    def __init__(self, prob: float, min_payload: int, seed: int) -> None:
        if not 0 <= prob <= 1 or min_payload < 1:
            raise ValueError(f"a chance is in [0, 1] and a payload at least 1 byte, not {prob} and {min_payload}")
        self.prob, self.min_payload = prob, min_payload
        self._rng = random.Random(seed ^ 0xC0FFEE)

    def __call__(self, packet: bytes) -> bytes | None:
        """``packet`` with a byte flipped, or None to let it go on as it is (as a packet the
        queue copied only in part must: ``whole``)."""
        if self.prob == 0 or not whole(packet):
            return None
        start, end = payload_span(packet)
        if end - start < self.min_payload or self._rng.random() >= self.prob:
            return None
        return flip_payload_byte(packet, self._rng.randrange(end - start))


class Duplicate:
    """Which packets go twice: at ``prob``, a packet handed over whole (a truncated copy could
    not be sent again); seeded, so a run can be replayed."""

    def __init__(self, prob: float, seed: int) -> None:
        if not 0 <= prob <= 1:
            raise ValueError(f"a chance is in [0, 1], not {prob}")
        self.prob = prob
        self._rng = random.Random(seed ^ 0xD0D0)

    def __call__(self, packet: bytes) -> bytes | None:
        """The copy to send again (its TCP checksum made whole), or None."""
        if self.prob == 0 or not whole(packet) or self._rng.random() >= self.prob:
            return None
        return with_checksum(packet)


@dataclass(frozen=True)
class Copy:
    """A packet's copy, held until its own release, then sent from the raw socket."""

    data: bytes


class Handler:
    """The packets held now, in the order of their release, and the loop that releases them."""

    def __init__(
        self,
        hold: Hold,
        stats_path: Path | None,
        corrupt: Corrupt | None = None,
        duplicate: Duplicate | None = None,
    ) -> None:
        self.hold, self.stats, self.stats_path, self.corrupt = hold, Stats(), stats_path, corrupt
        self.duplicate = duplicate
        self._held: list[tuple[float, int, float, int, Any]] = []  # (release at, seq, arrived, size, packet)
        self._seq = 0
        self._stop = False
        self._echoes: Counter[bytes] = Counter()  # copies sent, by segment, not yet seen back
        self._raw: socket.socket | None = None

    def take(self, packet: Any) -> None:
        """NetfilterQueue's callback: a copy this handler sent goes on at once; any other
        packet is rewritten if it is to be corrupted, held (its verdict is given later, with
        the rewritten bytes), and its copy held too if it is to go twice."""
        now = time.monotonic()
        copied = packet.get_payload()
        if self._echoes and whole(copied) and self._echoes[key := segment_key(copied)] > 0:
            self._echoes[key] -= 1
            if not self._echoes[key]:
                del self._echoes[key]  # so an empty counter stops the lookup for every packet
            packet.accept()
            self.stats.echoed += 1
            return
        if self.corrupt is not None and (flipped := self.corrupt(copied)) is not None:
            packet.set_payload(flipped)
            self.stats.corrupted += 1
            copied = flipped
        size = ip_length(copied)  # the packet's own length: NetfilterQueue copies at most about 4 KB of it
        self._hold(now, size, packet)
        if self.duplicate is not None and (copy := self.duplicate(copied)) is not None:
            self._hold(now, size, Copy(copy))

    def _hold(self, now: float, size: int, packet: Any) -> None:
        self._seq += 1
        heapq.heappush(self._held, (self.hold.release_at(now), self._seq, now, size, packet))

    def _send(self, copy: Copy) -> None:
        """A copy goes out of the raw socket (``IPPROTO_RAW``: its own IP header), to its
        packet's destination inside the namespace."""
        if self._raw is None:
            self._raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
        with contextlib.suppress(OSError):  # a copy lost is a duplicate that never came: nothing to count
            self._raw.sendto(copy.data, (socket.inet_ntoa(copy.data[16:20]), 0))
            self._echoes[segment_key(copy.data)] += 1
            self.stats.duplicated += 1

    def _release(self, until: float) -> None:
        while self._held and self._held[0][0] <= until:
            _, _, arrived, size, packet = heapq.heappop(self._held)
            if isinstance(packet, Copy):
                self._send(packet)
                continue
            packet.accept()
            self.stats.released(size, arrived, time.monotonic())

    def _release_all(self) -> None:
        """At the stop: every packet still held goes on now, counted apart (its hold was cut
        short); a copy not yet sent is never sent."""
        originals = [entry[-1] for entry in self._held if not isinstance(entry[-1], Copy)]
        self.stats.released_at_stop = len(originals)
        self._held.clear()
        for packet in originals:
            packet.accept()
        if self._raw is not None:
            self._raw.close()

    def write_stats(self) -> None:
        if self.stats_path is not None:
            tmp = self.stats_path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.stats.to_json(len(self._held))))
            tmp.replace(self.stats_path)

    def stop(self, *_: object) -> None:
        self._stop = True

    def run(self, queue: Any, parent: int) -> None:
        fd = queue.get_fd()
        next_tick = 0.0
        while not self._stop:
            now = time.monotonic()
            wait = min(_TICK_S, max(0.0, self._held[0][0] - now)) if self._held else _TICK_S
            try:
                readable, _, _ = select.select([fd], [], [], wait)
            except InterruptedError:
                continue
            if readable:
                queue.run(block=False)
            now = time.monotonic()
            self._release(now)
            if now >= next_tick:
                next_tick = now + _TICK_S
                self.write_stats()
                if os.getppid() != parent:  # the rig is gone: so is the fault
                    self._stop = True
        self._release_all()
        self.write_stats()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m chaos.system.queue_handler", description=__doc__.split("\n\n")[0])
    ap.add_argument("--queue", type=int, required=True, help="the NFQUEUE number the rule sends packets to")
    ap.add_argument("--delay-ms", type=float, default=0.0)
    ap.add_argument("--jitter-ms", type=float, default=0.0)
    ap.add_argument("--corrupt-prob", type=float, default=0.0, help="the chance a data packet gets a byte flipped")
    ap.add_argument(
        "--corrupt-min-payload", type=int, default=1024, help="the TCP payload a packet needs to be corrupted"
    )
    ap.add_argument("--duplicate-prob", type=float, default=0.0, help="the chance a packet is sent twice")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--stats", type=Path, help="write the figures here as JSON")
    ap.add_argument(
        "--parent",
        type=int,
        help="the starter's pid: once this process's parent is another (the starter is gone), it stops (default: its parent now)",
    )
    args = ap.parse_args(argv)
    from netfilterqueue import NetfilterQueue  # only where the packets extra is installed

    parent = args.parent or os.getppid()  # named by the starter: it may be gone already
    corrupt = Corrupt(args.corrupt_prob, args.corrupt_min_payload, args.seed) if args.corrupt_prob else None
    duplicate = Duplicate(args.duplicate_prob, args.seed) if args.duplicate_prob else None
    handler = Handler(Hold(args.delay_ms, args.jitter_ms, args.seed), args.stats, corrupt, duplicate)
    signal.signal(signal.SIGTERM, handler.stop)
    signal.signal(signal.SIGINT, handler.stop)
    queue = NetfilterQueue()
    queue.bind(args.queue, handler.take, max_len=65536)
    try:
        handler.write_stats()  # the starter waits for this file before it adds the rule
        print(
            f"queue handler bound: queue {args.queue}, {args.delay_ms:g} ms ± {args.jitter_ms:g} ms, "
            f"corrupting at {args.corrupt_prob:g}, duplicating at {args.duplicate_prob:g}",
            flush=True,
        )
        handler.run(queue, parent)
    finally:
        queue.unbind()
    return 0


if __name__ == "__main__":
    sys.exit(main())
