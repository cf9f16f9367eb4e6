"""One IPv4 TCP segment, as NFQUEUE hands it over: where its payload lies, and the same segment
with one payload byte flipped and its TCP checksum made right again, or as it is with its
checksum made whole (a copy sent again from a raw socket).

A packet NFQUEUE rewrites is delivered with its checksum checked in full (the kernel drops
the checksum offload state of a mangled packet), so a rewritten byte under the old checksum
would be dropped and retransmitted intact: the corruption would never reach the peer. With
the checksum recomputed, the flipped byte is what the peer's socket reads, as a bit flip in
a NIC or a switch past its CRC would be.

Why not scapy: two header fields and RFC 1071's sum are all this needs, on the handler's
per-packet path, where building scapy's layers costs milliseconds a packet.
"""

from __future__ import annotations

import struct
from array import array

__all__ = ["flip_payload_byte", "ip_length", "payload_span", "segment_key", "tcp_checksum_ok", "whole", "with_checksum"]

_TCP = 6


def ip_length(packet: bytes) -> int:
    """The IPv4 packet's length as its header gives it (a copy of it may be shorter)."""
    return int(struct.unpack_from("!H", packet, 2)[0]) if len(packet) >= 4 else len(packet)


def whole(packet: bytes) -> bool:
    """Whether ``packet`` holds the whole IPv4 packet its header describes: NFQUEUE copies at
    most its binding's buffer (about 4 KB for NetfilterQueue), and a truncated copy handed
    back would cut the packet short."""
    return len(packet) >= 20 and len(packet) >= struct.unpack_from("!H", packet, 2)[0]


def payload_span(packet: bytes) -> tuple[int, int]:
    """Where the TCP payload lies in an IPv4 packet: (start, end); start == end for none.
    Raises ValueError for anything but IPv4 TCP."""
    if len(packet) < 20 or packet[0] >> 4 != 4 or packet[9] != _TCP:
        raise ValueError("not an IPv4 TCP packet")
    ihl = (packet[0] & 0x0F) * 4
    total = struct.unpack_from("!H", packet, 2)[0]
    doff = (packet[ihl + 12] >> 4) * 4
    return ihl + doff, min(total, len(packet))


def _sum16(data: bytes) -> int:
    """RFC 1071's ones' complement sum of ``data`` as 16-bit words, in the machine's order
    (the sum is the same in either byte order, swapped; the caller packs it back alike)."""
    if len(data) % 2:
        data += b"\0"
    total = sum(array("H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total


def _tcp_checksum(packet: bytes | bytearray) -> bytes:
    """The TCP checksum field's two bytes for ``packet`` (with its own field read as zero)."""
    ihl = (packet[0] & 0x0F) * 4
    total = struct.unpack_from("!H", packet, 2)[0]
    segment = bytearray(packet[ihl:total])
    segment[16:18] = b"\0\0"
    pseudo = bytes(packet[12:20]) + struct.pack("!BBH", 0, _TCP, len(segment))
    return struct.pack("=H", ~_sum16(pseudo + bytes(segment)) & 0xFFFF)


def tcp_checksum_ok(packet: bytes) -> bool:
    ihl = (packet[0] & 0x0F) * 4
    return packet[ihl + 16 : ihl + 18] == _tcp_checksum(packet)


def flip_payload_byte(packet: bytes, offset: int) -> bytes:
    """``packet`` with the byte ``offset`` bytes into its TCP payload inverted (every bit
    flipped), and its TCP checksum recomputed."""
    start, end = payload_span(packet)
    if not 0 <= offset < end - start:
        raise ValueError(f"offset {offset} outside a payload of {end - start} bytes")
    out = bytearray(packet)
    out[start + offset] ^= 0xFF
    return with_checksum(out)


def with_checksum(packet: bytes | bytearray) -> bytes:
    """``packet`` with its TCP checksum computed in full. A packet NFQUEUE hands over on a
    loopback may carry only the partial sum checksum offload leaves for the device; a copy of
    it sent from a raw socket has no offload left to finish it, and would be dropped."""
    out = bytearray(packet)
    ihl = (out[0] & 0x0F) * 4
    out[ihl + 16 : ihl + 18] = _tcp_checksum(out)
    return bytes(out)


def segment_key(packet: bytes) -> bytes:
    """What tells one TCP segment from another: its addresses and the segment itself, not the
    IP header's identification and checksum, which the kernel may fill in on a raw send."""
    ihl = (packet[0] & 0x0F) * 4
    return bytes(packet[12:20]) + bytes(packet[ihl : ip_length(packet)])
