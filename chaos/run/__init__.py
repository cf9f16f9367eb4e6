"""Running the suites: the pytest plugin and its fixtures, the scenario kit a test is written
with, bounds taken from the target, each run's report folder and results, and the runs of
runs (the kill matrix, the conformance check, pytest as a child process)."""
