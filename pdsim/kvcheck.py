"""The KV's integrity: what decode generates from when bytes of the KV changed on their way,
SGLang's KV checksum that catches it, and the sender-side corruption that makes it happen.

pdsim's KV is a pattern of its context's digest (``pattern``), and decode generates from the
KV it received: from the context's digest when the bytes are the pattern, from a digest of
what arrived when they are not (``digest_of``), so a flipped byte changes the reply, as it
does on a real engine. SGLang 0.5.23's ``--disaggregation-enable-kv-checksum`` (off by
default) digests the KV on prefill and checks it on decode, failing a mismatch with "KV
checksum mismatch"; pdsim takes the same flag, its digest an Adler-32 (``zlib.adler32``, as
``sglang_cpu/shim`` makes SGLang's on a CPU).

``Corruption`` is a test hook, as SGLang's ``SGLANG_TEST_DISAGG_KV_CHECKSUM_MISMATCH_PROB``
is, but switched at run time (prefill's ``/pdsim/kv_corruption``): each KV chunk prefill
sends has, at its chance, one byte flipped after the checksum was taken, what a link that
corrupts bytes past TCP's checksum does. pdsim's links are Toxiproxy's, which cannot rewrite
bytes, so the sender does it.
"""

from __future__ import annotations

import random
import zlib

__all__ = ["Corruption", "digest_of", "pattern"]


def pattern(digest: str, n: int) -> bytes:
    """The first ``n`` bytes of the KV that stands for a context of this digest."""
    unit = bytes.fromhex(digest or "00")
    return (unit * (n // len(unit) + 1))[:n]


def digest_of(digest: str, chunks_checksum: int, lengths: list[int]) -> str:
    """What decode generates from: the context's digest if the chunks it received (their
    Adler-32 and lengths) are the context's KV, else a digest of what arrived."""
    intended = 1
    for n in lengths:
        intended = zlib.adler32(pattern(digest, n), intended)
    if intended == chunks_checksum:
        return digest
    return zlib.adler32(bytes.fromhex(digest or "00"), chunks_checksum).to_bytes(4, "big").hex() * 4


class Corruption:
    """Prefill's sender-side corruption: ``prob`` of its KV chunks get one byte flipped."""

    def __init__(self, seed: int | None = None) -> None:
        self.prob = 0.0
        self.corrupted = 0  # bytes flipped since the engine started
        self._rng = random.Random(seed)

    def passed(self, chunk: bytes) -> bytes:
        """``chunk`` as it leaves: one byte inverted at the hook's chance."""
        if not chunk or self.prob <= 0 or self._rng.random() >= self.prob:
            return chunk
        at = self._rng.randrange(len(chunk))
        self.corrupted += 1
        return chunk[:at] + bytes([chunk[at] ^ 0xFF]) + chunk[at + 1 :]
