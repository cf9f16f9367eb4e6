"""Packet faults in a namespace of the stack's own (``chaos.system.bridge``, ``chaos.system.netns``,
``chaos.faults.packet``), with the real kernel: a plain TCP echo server inside the
namespace, reached from the host's loopback through the bridge. Each fault takes effect
(the probe and the traffic show it, its counters move) and its heal removes every rule and
class; a SIGKILLed bridge and server leave no namespace behind."""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path
from typing import Any, cast

import pytest

from chaos.errors import FaultNotApplied
from chaos.faults.packet import PacketFault, PacketLink
from chaos.faults.queued import PacketCorrupt, PacketDelay, PacketDuplicate
from chaos.system.netns import Namespace, nfqueue_available
from chaos.system.ports import PortAllocator
from chaos.system.procs import ProcSpec, alive, run, spawn, stop_group
from chaos.system.wait import wait_until
from tests.ports import port_base

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces and packet rules need root")

ECHO = """
import socket, sys, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen()
def echo(c):
    with c:
        while data := c.recv(65536):
            c.sendall(data)
while True:
    c, _ = s.accept()
    threading.Thread(target=echo, args=(c,), daemon=True).start()
"""


class Stage:
    """A namespace held by a bridge with one echo server inside: what a target with packet
    links hands a fault."""

    packet_links = ("echo",)

    def __init__(self, tmp: Path, port: int) -> None:
        self.port = port
        self.bridge = spawn(
            ProcSpec(
                "bridge", (sys.executable, "-m", "chaos.system.bridge", "--export", str(port)), {}, tmp / "bridge.log"
            )
        )
        wait_until(lambda: "bridge ready" in (tmp / "bridge.log").read_text(), timeout_s=10, what="the bridge ready")
        self.ns = Namespace(self.bridge)
        self.echo = spawn(
            ProcSpec("echo", (*self.ns.enter(), sys.executable, "-c", ECHO, str(port)), {}, tmp / "echo.log")
        )
        connect = f"import socket; socket.create_connection(('127.0.0.1', {port}), 1).close(); print('up')"
        wait_until(
            lambda: self.ns.run(sys.executable, "-c", connect, check=False).strip() == "up",
            timeout_s=10,
            what="echo up in the namespace",
        )

    def packet_link(self, link: str) -> PacketLink:
        return PacketLink(self.ns, (self.port,), f"echo server {self.port}")

    def stop(self) -> None:
        for pid in (self.echo, self.bridge):
            if alive(pid):
                stop_group(pid, grace_s=1.0)


@pytest.fixture
def stage(tmp_path, pytestconfig):
    s = Stage(tmp_path, PortAllocator(port_base(pytestconfig, "netns")).next_base())  # a range of the worker's own
    yield s
    s.stop()


def _echo(port: int, payload: bytes, timeout_s: float = 2.0) -> str:
    """Send ``payload`` through the bridge and read it back: "ok", "timeout" or "reset"."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as c:
            c.sendall(payload)
            got = b""
            while len(got) < len(payload):
                chunk = c.recv(65536)
                if not chunk:
                    return "reset"
                got += chunk
        return "ok" if got == payload else "garbled"
    except socket.timeout:
        return "timeout"
    except OSError:
        return "reset"


def test_the_bridge_joins_the_namespace_to_the_hosts_loopback(stage):
    assert _echo(stage.port, b"hello") == "ok"
    assert os.readlink(f"/proc/{stage.bridge}/ns/net") != os.readlink("/proc/self/ns/net")  # its own namespace
    # nothing listens on the port inside the host's namespace but the bridge
    host = run(["ss", "-Hltnp", f"sport = :{stage.port}"], timeout_s=10).stdout
    assert f"pid={stage.bridge}," in host and f"pid={stage.echo}," not in host


@pytest.mark.parametrize(
    ("mode", "probe", "traffic"),
    [("blackhole", "timeout", "timeout"), ("reset", "refused", "reset"), ("refuse", "refused", "reset")],
)
def test_a_rule_fault_takes_effect_counts_and_heals(stage, mode, probe, traffic):
    fault = PacketFault(stage, "echo", mode=mode)
    fault.inject()
    try:
        assert f"probe: connect {probe}" in fault.verify()
        assert _echo(stage.port, b"x" * 100, timeout_s=1.0) == traffic
    finally:
        fault.heal()
    evidence = fault.verify_healed()
    assert "none listed" in evidence and "met 0 packets" not in evidence, evidence  # the probe and the traffic met it
    assert _echo(stage.port, b"after the heal") == "ok"
    assert "pdchaos" not in stage.ns.run("iptables", "-S")


def test_an_open_connection_outlives_refuse_but_not_reset(stage):
    with socket.create_connection(("127.0.0.1", stage.port), timeout=2) as c:
        c.sendall(b"a")
        assert c.recv(1) == b"a"
        refuse = PacketFault(stage, "echo", mode="refuse")
        refuse.inject()
        try:
            c.sendall(b"b")
            assert c.recv(1) == b"b"  # open connections carry on
        finally:
            refuse.heal()
        reset = PacketFault(stage, "echo", mode="reset")
        reset.inject()
        try:
            c.sendall(b"c")
            assert c.recv(1) in (b"", None) or pytest.fail("the open connection was not reset")
        except OSError:
            pass  # reset: as expected
        finally:
            reset.heal()


def test_a_crawl_shapes_the_links_traffic_and_heals(stage):
    fault = PacketFault(stage, "echo", rate_kbit=800)  # 100 KB/s
    fault.inject()
    try:
        assert "htb class" in fault.verify()
        t0 = time.monotonic()
        assert _echo(stage.port, b"y" * 200_000, timeout_s=20) == "ok"
        took = time.monotonic() - t0
    finally:
        fault.heal()
    assert took > 1.0, f"200 KB to the server at 100 KB/s took {took:.2f}s"
    assert "none listed" in fault.verify_healed()
    assert (
        int(str(fault._met).split()[2]) >= 200_000
    )  # the bytes to the server crossed the class; the echo came back unshaped
    t0 = time.monotonic()
    assert _echo(stage.port, b"y" * 200_000) == "ok"
    assert time.monotonic() - t0 < took / 2


def test_a_fault_that_did_not_take_is_caught(stage):
    fault = PacketFault(stage, "echo", mode="blackhole")
    fault.inject()
    stage.ns.run("iptables", "-F", "PDCHAOS")  # someone removed the rules behind our back
    with pytest.raises(FaultNotApplied, match="no rule tagged"):
        fault.verify()


def test_a_sigkilled_stage_leaves_no_namespace(stage):
    fault = PacketFault(stage, "echo", rate_kbit=800)
    fault.inject()
    ns = os.readlink(f"/proc/{stage.bridge}/ns/net")
    for pid in (stage.echo, stage.bridge):
        os.killpg(pid, 9)
    wait_until(lambda: not alive(stage.echo) and not alive(stage.bridge), timeout_s=5, what="both gone")
    listed = run(["lsns", "-t", "net", "-n", "-o", "NS"], timeout_s=10).stdout.split()
    assert ns.strip("net:[]") not in listed  # the namespace, its rules and its qdisc are gone with its processes


def test_a_suite_names_the_link_and_the_target_picks_the_mechanism(stage):
    """``faults.blackhole("echo")`` on a target that breaks "echo" with packet rules is a
    packet fault; what only a Toxiproxy can do is refused with the reason, before anything
    is injected."""
    from types import SimpleNamespace

    from chaos.errors import ConfigError
    from chaos.faults import Faults
    from chaos.observe.history import History

    stage.info = SimpleNamespace(proxies={})  # no proxy on the link
    stage.capabilities = frozenset()
    faults = Faults(stage, History(), sampler=cast(Any, None), toxiproxy=None)  # a packet fault samples nothing
    with faults.blackhole("echo", stream="upstream") as fault:
        assert isinstance(fault, PacketFault) and fault.mode == "blackhole"
        assert _echo(stage.port, b"z", timeout_s=1.0) == "timeout"
    assert _echo(stage.port, b"z") == "ok"
    with faults.down("echo") as fault:
        assert (
            isinstance(fault, PacketFault) and fault.mode == "reset"
        )  # Toxiproxy's down closes open connections and refuses new ones: so does reset
    if nfqueue_available():
        with faults.latency("echo", 100, stream="upstream") as fault:
            assert isinstance(fault, PacketDelay) and fault.latency_ms == 100
            assert _echo(stage.port, b"z") == "ok"
    for refused in (
        lambda: faults.limit_data("echo", 10),
        lambda: faults.blackhole("echo", timeout_ms=500),
    ):
        with pytest.raises(ConfigError, match="needs a Toxiproxy on the link"):
            refused()


needs_nfqueue = pytest.mark.skipif(
    not nfqueue_available(), reason="delay on a packet link needs the packets extra and NFQUEUE (make setup-sglang)"
)


def _timed_echo(port: int, payload: bytes, timeout_s: float = 10.0) -> tuple[str, float]:
    t0 = time.monotonic()
    got = _echo(port, payload, timeout_s=timeout_s)
    return got, time.monotonic() - t0


@needs_nfqueue
def test_a_delay_holds_each_packet_to_the_link_and_heals(stage):
    _, before = _timed_echo(stage.port, b"x" * 100)
    fault = PacketDelay(stage, "echo", 200)
    fault.inject()
    try:
        assert "NFQUEUE" in fault.verify()
        got, during = _timed_echo(stage.port, b"x" * 100)
    finally:
        fault.heal()
    assert got == "ok"
    # the connect's SYN and the data each wait 200 ms on their way to the server
    assert during >= 0.4 > before, (before, during)
    figures = fault.figures
    assert figures["packets"] >= 3 and figures["held_ms_min"] >= 200, figures  # never held less than the delay
    assert figures["reordered"] == 0, figures  # no jitter: no reordering
    assert "the handler took" in fault.verify_healed()
    assert "pdchaos" not in stage.ns.run("iptables", "-S")
    assert _timed_echo(stage.port, b"after the heal")[1] < 0.4


SEGMENTS = """
import socket, sys, time
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
sent = b"".join(i.to_bytes(4, "big") for i in range(200))
for i in range(0, len(sent), 4):
    c.sendall(sent[i : i + 4])  # a segment each, 2 ms apart
    time.sleep(0.002)
got = b""
while len(got) < len(sent) and (chunk := c.recv(65536)):
    got += chunk
print("ok" if got == sent else f"garbled {len(got)}")
"""


@needs_nfqueue
def test_jitter_reorders_packets_and_the_stream_survives(stage):
    fault = PacketDelay(stage, "echo", 40, jitter_ms=30, seed=7)
    fault.inject()
    try:
        # sent from inside the namespace, so that each write is a segment of its own on the link
        got = stage.ns.run(sys.executable, "-c", SEGMENTS, str(stage.port)).strip()
    finally:
        fault.heal()
    assert got == "ok"  # TCP put the reordered segments back in order
    figures = fault.figures
    assert figures["packets"] >= 100 and figures["reordered"] > 0, figures
    assert figures["held_ms_min"] >= 10 and figures["held_ms_max"] <= 70 + 20, figures  # 40 ± 30 ms, plus a tick


@needs_nfqueue
def test_the_heal_lets_every_held_packet_go_at_once(stage):
    fault = PacketDelay(stage, "echo", 30_000)
    fault.inject()
    with socket.socket() as c:
        c.settimeout(10)
        c.setblocking(False)
        with pytest.raises(BlockingIOError):
            c.connect(("127.0.0.1", stage.port))  # its SYN now waits 30 s in the queue handler
        wait_until(lambda: fault.figures.get("held_now", 0) > 0, timeout_s=5, what="the SYN held")
        fault.heal()
        c.setblocking(True)
        c.sendall(b"released")
        assert c.recv(100) == b"released"
    assert fault.figures["released_at_stop"] >= 1, fault.figures


@needs_nfqueue
def test_the_queue_handler_goes_when_its_starter_dies(stage, tmp_path):
    """A crashed rig leaves no handler behind: it would keep the stack's namespace alive."""
    starter = spawn(
        ProcSpec(
            "starter",
            (
                "sh",
                "-c",
                f"{' '.join(stage.ns.enter())} {sys.executable} -m chaos.system.queue_handler --queue 99 --delay-ms 10 --parent $$ & wait",
            ),
            {},
            tmp_path / "starter.log",
        )
    )
    found = wait_until(
        lambda: run(
            ["pgrep", "-f", "^\\S*python\\S* -m chaos.system.queue_handler --queue 99"], timeout_s=5
        ).stdout.split(),
        timeout_s=5,
        what="the queue handler started",
    )
    os.kill(starter, 9)
    wait_until(lambda: not any(alive(int(pid)) for pid in found), timeout_s=5, what="the queue handler gone")


def _echoed_through(fault: Any, port: int, sent: bytes) -> bytes:
    """``sent`` to the echo server and back with ``fault`` on (injected, verified, healed)."""
    fault.inject()
    try:
        assert "NFQUEUE" in fault.verify()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
            c.sendall(sent)
            got = b""
            while len(got) < len(sent) and (chunk := c.recv(65536)):
                got += chunk
    finally:
        fault.heal()
    return got


@needs_nfqueue
def test_corruption_reaches_the_receiver_as_flipped_bytes(stage):
    """Every data packet to the server gets one byte flipped, under a checksum made right: the
    server reads the flipped bytes (a wrong checksum would have the kernel drop each packet,
    and TCP would retransmit it into the same fault until the echo timed out)."""
    sent = bytes(i % 251 for i in range(300_000))
    fault = PacketCorrupt(stage, "echo", 1.0, min_payload=1024)
    got = _echoed_through(fault, stage.port, sent)
    flipped = [i for i in range(len(sent)) if got[i] != sent[i]]
    figures = fault.figures
    assert len(got) == len(sent) and flipped, "the stream came back whole: nothing was corrupted"
    assert all(got[i] == sent[i] ^ 0xFF for i in flipped)  # inverted bytes, nothing else
    assert len(flipped) == figures["corrupted"], (len(flipped), figures)  # one byte a corrupted packet
    assert "corrupted" in fault.verify_healed()
    assert _echo(stage.port, sent[:5000]) == "ok"  # healed: intact again


def _dsacks_sent(ns: Namespace) -> int:
    """The namespace's count of D-SACKs sent: each a segment its TCP received twice
    (``TcpExt: TCPDSACKOldSent`` in /proc/net/netstat, read inside the namespace)."""
    lines = [ln.split() for ln in ns.run("cat", "/proc/net/netstat").splitlines() if ln.startswith("TcpExt:")]
    names, values = lines[0], lines[1]
    return int(values[names.index("TCPDSACKOldSent")])


@needs_nfqueue
def test_duplicated_packets_reach_the_receiver_which_drops_them(stage):
    """Every packet to the server sent twice, each held 2 ± 2 ms: the copies come back through
    the rule (echoed), the server's TCP receives them and says so (D-SACKs), and the stream
    comes back whole and in order."""
    sent = bytes(i % 251 for i in range(300_000))
    before = _dsacks_sent(stage.ns)
    fault = PacketDuplicate(stage, "echo", 1.0, delay_ms=2, jitter_ms=2, seed=3)
    got = _echoed_through(fault, stage.port, sent)
    figures = fault.figures
    assert got == sent
    assert figures["duplicated"] >= 50 and figures["echoed"] >= 50, figures
    assert _dsacks_sent(stage.ns) > before, "the server's TCP never received a packet twice"
    assert "copies again" in fault.verify_healed()
    assert _echo(stage.port, sent[:5000]) == "ok"
