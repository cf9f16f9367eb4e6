"""A container's log read from where it was last read (``chaos.targets.docker_logs``): the
whole log as one string, of which each read fetches only what is new. Its logic against
recorded Docker answers (Docker's ``since`` is inclusive, microsecond-precise; stamps are
nanosecond and trim trailing zeros), then once against a real container."""

from __future__ import annotations

from typing import Any

from chaos.system.wait import wait_until
from chaos.targets.docker_logs import ContainerLog, _stamp
from tests.dockerhost import engine_or_skip


class Recorded:
    """A container's log as Docker keeps it: stamped lines, filtered by ``since`` as dockerd does."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []
        self.asked: list[float | None] = []

    def logs(self, *, stdout: bool, stderr: bool, timestamps: bool, since: float | None = None) -> bytes:
        self.asked.append(since)
        keep = [
            (s, m)
            for s, m in self.lines
            if since is None or _stamp(s)[0] + _stamp(s)[1] / 1e9 >= int(since * 1e6) / 1e6
        ]
        return "".join(f"{s} {m}\n" for s, m in keep).encode()


def test_each_read_fetches_what_is_new_and_the_text_is_the_whole_log():
    c = Recorded()
    log = ContainerLog("abc")
    c.lines += [("2026-12-06T01:00:00.1Z", "one"), ("2026-12-06T01:00:00.123456789Z", "two")]
    assert log.read(c) == "one\ntwo\n" and c.asked == [None]
    # two lines at the very stamp of the last kept one, and one within the same microsecond
    c.lines += [("2026-12-06T01:00:00.123456789Z", "three"), ("2026-12-06T01:00:00.1234568Z", "four")]
    assert log.read(c) == "one\ntwo\nthree\nfour\n"
    assert c.asked[-1] is not None and c.asked[-1] < 1796518800.1234568  # asked from just before "two"
    c.lines += [("2026-12-06T01:00:01Z", "five")]
    assert log.read(c) == "one\ntwo\nthree\nfour\nfive\n"
    assert log.read(c) == "one\ntwo\nthree\nfour\nfive\n"  # nothing new: nothing repeated


def test_a_stamp_with_trimmed_zeros_orders_as_its_value():
    assert _stamp("2026-12-06T01:00:00.5Z") > _stamp("2026-12-06T01:00:00.123456789Z")
    assert _stamp("2026-12-06T01:00:00Z") == (1796518800, 0)


def test_a_real_containers_log_read_in_pieces_is_its_log():
    engine = engine_or_skip()
    c: Any = engine.containers.run(
        "pybase:ci",
        ["sh", "-c", "for i in 1 2 3; do echo a$i; done; sleep 1; for i in 1 2 3; do echo b$i; done; sleep 30"],
        detach=True,
        network_mode="none",
    )
    try:
        log = ContainerLog(c.id)

        def read_until(last: str) -> str:
            text = log.read(c)
            return text if last in text else ""

        first = wait_until(lambda: read_until("a3"), timeout_s=20, what="a3 in the log")
        assert "b1" not in first or first.endswith("b3\n")
        whole = wait_until(lambda: read_until("b3"), timeout_s=20, what="b3 in the log")
        assert whole == bytes(c.logs()).decode() == "a1\na2\na3\nb1\nb2\nb3\n"
    finally:
        c.remove(force=True)
        engine.close()
