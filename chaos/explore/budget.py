"""How long explore runs: a time or a number of episodes. Its own module because the pytest
plugin parses ``--explore`` at every start, and must not import explore's runner to do it."""

from __future__ import annotations

from dataclasses import dataclass

from chaos.errors import ConfigError
from chaos.run.soak import parse_duration

__all__ = ["Budget"]


@dataclass(frozen=True)
class Budget:
    """How long to explore: ``seconds`` of wall time, or ``episodes`` episodes."""

    seconds: float | None = None
    episodes: int | None = None

    @classmethod
    def parse(cls, text: str) -> Budget:
        """``10m``, ``90s``, ``1h``: a time (``chaos.run.soak.parse_duration``); a bare number: episodes."""
        text = text.strip()
        if text.isdigit():
            return cls(episodes=int(text))
        try:
            return cls(seconds=parse_duration(text))
        except ValueError:
            raise ConfigError(f"budget {text!r}: a time (90s, 10m, 1h) or a number of episodes") from None

    def left(self, started: float, episodes: int, now: float) -> bool:
        if self.episodes is not None:
            return episodes < self.episodes
        return now - started < (self.seconds or 0)
