"""The judging package: verdicts and premises as declared checks of a history, each
returning a status with an evidence record (``model``), split by where the evidence comes
from. ``chaos.verdicts`` is the one name suites import."""
