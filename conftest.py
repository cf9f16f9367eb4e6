"""Loads the pd-chaos pytest plugin for tests/ and suites/."""

pytest_plugins = ["chaos.run.plugin"]
