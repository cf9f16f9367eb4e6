"""Reports drawn from histories: timelines, the where-is-it-stuck table, run summaries."""

from chaos.reports.stuck import StuckRow, where_stuck
from chaos.reports.timeline import render_timeline

__all__ = ["StuckRow", "render_timeline", "where_stuck"]
