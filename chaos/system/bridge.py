"""The bridge: a process that makes a network namespace of the stack's own and joins its
loopback to the host's, port by port, at the same addresses.

Real engines pick their own ports for the KV (Mooncake) and control (ZMQ) links, so no
proxy can sit on them; pd-chaos breaks those links with packet rules instead, as Chaos Mesh
and Pumba do, in a namespace the stack made (``chaos.system.netns``). The engines run in it, on its
own loopback, where their random ports live; everything else (the rig, smg, Toxiproxy, a
user's curl) stays on the host's loopback and reaches them through this bridge:

    host 127.0.0.1:P  --export-->  namespace 127.0.0.1:P   (engine HTTP, prefill's bootstrap server)
    namespace 127.0.0.1:P  --import-->  host 127.0.0.1:P   (decode to Toxiproxy's bootstrap proxy)

No address but loopback exists on either side, so no traffic leaves 127.0.0.0/8; the
namespace, and every rule and qdisc in it, is gone once the bridge and the engines in it are.

In a Compose stack the namespace is a container's that Compose made with no network: the
bridge is that container's process, the engines' containers join its namespace, and it
reaches the host's through ``--host-netns``, a bind mount of a host process's
``/proc/<pid>/ns/net`` (as ``ip netns`` keeps a namespace; opening another process's ns file
from inside a container is refused).

How: the export listeners are made first, in the host's namespace; then the process
unshares into a new one (``unshare(CLONE_NEWNET)``), brings its ``lo`` up and makes the
import listeners there. A socket keeps the namespace it was made in, so one asyncio loop
serves both sides: a connection accepted on one side is dialled on the other, with a socket
made after switching this thread's namespace (``setns``) for the moment of its creation.
Byte streams are copied as they come; a half-close is passed on as a half-close and a reset
as a reset, so the peers see what they would see on a direct connection. A dial that fails
(nothing listens there, or a packet rule refuses it) resets the accepted connection at once:
the one thing a bridge cannot pass on is "refused" itself, since it already accepted.

Why not socat: it cannot dial in another namespace without a process per connection
(``nsenter`` + ``socat`` at each accept); why not slirp4netns or rootlesskit: not packaged
for this purpose, and heavier than these 150 lines.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import os
import socket
import struct
import subprocess
import sys

__all__ = ["main"]

CLONE_NEWNET = 0x40000000
LOOPBACK = "127.0.0.1"
_CHUNK = 1 << 16

_libc = ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _setns(fd: int) -> None:
    _check(_libc.setns(fd, CLONE_NEWNET), "setns")


def _listen(port: int) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((LOOPBACK, port))
    s.listen(128)
    s.setblocking(False)
    return s


def _reset(sock: socket.socket) -> None:
    """Close with a reset (SO_LINGER 0): what the peer would see from a reset connection."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


class Bridge:
    """Copies connections between the host's namespace and the stack's, which this
    process's thread lives in once it has made it."""

    def __init__(self, host_ns: int, stack_ns: int) -> None:
        self.host_ns, self.stack_ns = host_ns, stack_ns
        self._joins: set[asyncio.Task[None]] = set()

    def socket_in(self, side: str) -> socket.socket:
        """A TCP socket made in ``side``'s namespace ("host" or "stack")."""
        if side == "host":
            _setns(self.host_ns)
        try:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        finally:
            if side == "host":
                _setns(self.stack_ns)
        s.setblocking(False)
        return s

    async def serve(self, listener: socket.socket, port: int, dial_side: str) -> None:
        loop = asyncio.get_running_loop()
        while True:
            conn, _ = await loop.sock_accept(listener)
            conn.setblocking(False)
            joining = asyncio.ensure_future(self._join(conn, port, dial_side))
            self._joins.add(joining)  # the loop keeps only a weak reference to a task
            joining.add_done_callback(self._joins.discard)

    async def _join(self, conn: socket.socket, port: int, dial_side: str) -> None:
        loop = asyncio.get_running_loop()
        out = self.socket_in(dial_side)
        try:
            await loop.sock_connect(out, (LOOPBACK, port))
        except OSError:
            out.close()
            _reset(conn)
            return
        for s in (conn, out):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pumps = [asyncio.ensure_future(_pump(conn, out)), asyncio.ensure_future(_pump(out, conn))]
        ended = "eof"
        for first in asyncio.as_completed(pumps):  # a reset either way ends both at once
            if await first == "reset":
                ended = "reset"
                break
        for pump in pumps:
            pump.cancel()
        for s in (conn, out):
            if ended == "reset":
                _reset(s)
            else:
                s.close()


async def _pump(src: socket.socket, dst: socket.socket) -> str:
    """Copy ``src`` to ``dst`` until EOF ("eof", passed on as a half-close) or an error
    ("reset")."""
    loop = asyncio.get_running_loop()
    try:
        while data := await loop.sock_recv(src, _CHUNK):
            await loop.sock_sendall(dst, data)
        dst.shutdown(socket.SHUT_WR)
        return "eof"
    except OSError:
        return "reset"


async def _run(
    bridge: Bridge, exports: list[tuple[socket.socket, int]], imports: list[tuple[socket.socket, int]]
) -> None:
    servers = [bridge.serve(s, p, "stack") for s, p in exports] + [bridge.serve(s, p, "host") for s, p in imports]
    await asyncio.gather(*servers)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m chaos.system.bridge", description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--export",
        type=int,
        action="append",
        default=[],
        metavar="PORT",
        help="host 127.0.0.1:PORT to the namespace's 127.0.0.1:PORT",
    )
    ap.add_argument(
        "--import",
        dest="imports",
        type=int,
        action="append",
        default=[],
        metavar="PORT",
        help="the namespace's 127.0.0.1:PORT to the host's 127.0.0.1:PORT",
    )
    ap.add_argument(
        "--host-netns",
        metavar="PATH",
        help="already in the stack's namespace (a container Compose made with no network): reach the host's through this file, a bind mount of a host process's ns/net",
    )
    args = ap.parse_args(argv)
    if args.host_netns:
        host_ns = os.open(args.host_netns, os.O_RDONLY)
        stack_ns = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        _setns(host_ns)
        exports = [(_listen(p), p) for p in args.export]  # in the host's namespace
        _setns(stack_ns)
    else:
        exports = [(_listen(p), p) for p in args.export]  # in the host's namespace, before the unshare
        host_ns = os.open("/proc/self/ns/net", os.O_RDONLY)
        _check(_libc.unshare(CLONE_NEWNET), "unshare(CLONE_NEWNET)")
        stack_ns = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        subprocess.run(
            ["ip", "link", "set", "lo", "up"], check=True, timeout=10
        )  # a child of this thread: in the new namespace
    imports = [(_listen(p), p) for p in args.imports]
    print(
        f"bridge ready: namespace /proc/{os.getpid()}/ns/net, exports {args.export}, imports {args.imports}", flush=True
    )
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_run(Bridge(host_ns, stack_ns), exports, imports))
    return 0


if __name__ == "__main__":
    sys.exit(main())
