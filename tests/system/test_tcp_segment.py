"""``chaos.system.tcp_segment``: a payload byte flipped, the TCP checksum right again, held
against RFC 1071's sum written out plainly (big-endian words, one at a time)."""

from __future__ import annotations

import struct

import pytest

from chaos.system.tcp_segment import flip_payload_byte, payload_span, segment_key, tcp_checksum_ok, with_checksum


def _rfc1071(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = 0
    for i in range(0, len(data), 2):
        total += (data[i] << 8) | data[i + 1]
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def _packet(payload: bytes, *, options: bytes = b"") -> bytes:
    """127.0.0.1:40000 -> 127.0.0.1:5000, with a checksum made by the plain sum."""
    doff = (20 + len(options)) // 4
    tcp = struct.pack("!HHIIBBHHH", 40000, 5000, 1, 0, doff << 4, 0x18, 65535, 0, 0) + options
    total = 20 + len(tcp) + len(payload)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, total, 0, 0, 64, 6, 0, bytes([127, 0, 0, 1]), bytes([127, 0, 0, 1]))
    pseudo = ip[12:20] + struct.pack("!BBH", 0, 6, len(tcp) + len(payload))
    checksum = _rfc1071(pseudo + tcp + payload)
    tcp = tcp[:16] + struct.pack("!H", checksum) + tcp[18:]
    return ip + tcp + payload


@pytest.mark.parametrize("size", [1, 2, 1023, 1500, 65000])
def test_a_flipped_byte_lands_in_the_payload_under_a_right_checksum(size):
    payload = bytes(i % 251 for i in range(size))
    packet = _packet(payload, options=b"\x01\x01\x08\x0a" + bytes(8))  # a timestamp option: a 32-byte header
    assert tcp_checksum_ok(packet)
    start, end = payload_span(packet)
    assert (start, end) == (20 + 32, len(packet))
    for offset in {0, size // 2, size - 1}:
        flipped = flip_payload_byte(packet, offset)
        diff = [i for i in range(len(packet)) if packet[i] != flipped[i]]
        assert start + offset in diff and all(i == start + offset or 36 <= i < 38 for i in diff)
        assert flipped[start + offset] == packet[start + offset] ^ 0xFF
        assert tcp_checksum_ok(flipped)
        assert flipped == _packet(flipped[start:], options=b"\x01\x01\x08\x0a" + bytes(8))  # the plain sum agrees


def test_an_offset_outside_the_payload_or_a_packet_not_tcp_is_refused():
    packet = _packet(b"abc")
    with pytest.raises(ValueError, match="outside a payload of 3"):
        flip_payload_byte(packet, 3)
    udp = bytearray(packet)
    udp[9] = 17
    with pytest.raises(ValueError, match="not an IPv4 TCP"):
        payload_span(bytes(udp))


def test_a_partial_checksum_is_made_whole():
    """A loopback packet's checksum offload leaves a partial sum; a copy sent again from a raw
    socket needs the whole one, computed as RFC 1071 does."""
    packet = _packet(b"a segment sent twice")
    ihl = 20
    partial = packet[: ihl + 16] + b"\x12\x34" + packet[ihl + 18 :]
    assert not tcp_checksum_ok(partial)
    assert with_checksum(partial) == packet


def test_a_segment_is_known_by_its_addresses_and_bytes_not_its_ip_id():
    packet = _packet(b"the same segment")
    renumbered = packet[:4] + b"\x00\x07" + packet[6:10] + b"\xab\xcd" + packet[12:]  # another IP id and checksum
    assert segment_key(renumbered) == segment_key(packet)
    assert segment_key(_packet(b"another segment")) != segment_key(packet)
