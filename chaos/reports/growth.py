"""A soak's growth report: each watched quantity at the quiet checkpoints, with its fitted
line, one panel per quantity (``soak.png``), and the slopes per hour with the floor's rise
that the verdict judges (``soak.md``)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from chaos.observe.growth import Limit, checkpoints, fit
from chaos.observe.history import History

__all__ = ["render_growth"]


def render_growth(history: History, limits: list[Limit], folder: Path) -> Path:
    """Write ``soak.png`` and ``soak.md`` into ``folder``; returns the picture's path."""
    fits = [(lim, fit(history, lim.metric)) for lim in limits]
    rows = ["| quantity | slope per hour | floor rise over the window | allowed | points |", "|---|---|---|---|---|"]
    for lim, f in fits:
        if f is None:
            rows.append(f"| {lim.label} | unknown (fewer than 3 checkpoint values) | | | |")
            continue
        rows.append(
            f"| {lim.label} | {lim.show(f.slope_per_s * 3600)} | {lim.show(f.growth)} over {f.window_s:.0f} s | {lim.show(lim.allowed(f), sign=False)} | {len(f.points)} |"
        )
    (folder / "soak.md").write_text(f"# Soak: {len(checkpoints(history))} checkpoints\n\n" + "\n".join(rows) + "\n")
    fig, axes = plt.subplots(len(fits), 1, figsize=(10, 1.8 * len(fits)), sharex=True, squeeze=False)
    for ax, (lim, f) in zip(axes[:, 0], fits, strict=True):
        ax.set_title(f"{lim.label} ({lim.unit.strip() or 'count'})", fontsize=8, loc="left")
        if f is None:
            ax.text(
                0.5, 0.5, "fewer than 3 checkpoint values", ha="center", va="center", transform=ax.transAxes, fontsize=8
            )
            continue
        ts = [t for t, _ in f.points]
        ax.plot(ts, [v / lim.scale for _, v in f.points], "o", markersize=3)
        ax.plot(
            ts,
            [(f.intercept + f.slope_per_s * t) / lim.scale for t in ts],
            "-",
            linewidth=1,
            label=f"{lim.show(f.slope_per_s * 3600)}/h",
        )
        ax.legend(fontsize=7, loc="upper left")
    axes[-1, 0].set_xlabel("seconds since the test began")
    fig.tight_layout()
    path = folder / "soak.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
