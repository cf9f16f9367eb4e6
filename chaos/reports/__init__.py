"""Reports drawn from histories: timelines, the where-is-it-stuck table, run summaries."""

from chaos.reports.stuck import HOPS, StuckRow, where_stuck
from chaos.reports.timeline import render_timeline

__all__ = ["HOPS", "StuckRow", "render_timeline", "where_stuck"]
