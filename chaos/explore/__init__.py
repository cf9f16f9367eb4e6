"""Explore: seeded random fault schedules over the suites' kit, judged by universal
invariants, shrunk to a runnable reproducer (docs/explore.md)."""
