"""Helpers for the tests that need a real Docker engine: the engine (or a skip saying how
to get one) and a Compose project's containers."""

from __future__ import annotations

from typing import Any

import pytest

__all__ = ["engine_or_skip", "project_containers"]


def engine_or_skip() -> Any:
    """A docker SDK client that answered a ping; skips the test when no engine runs."""
    docker = pytest.importorskip("docker")
    try:
        client = docker.from_env(timeout=5)
        client.ping()
    except Exception as exc:  # docker.errors.DockerException and connection errors
        pytest.skip(f"no Docker engine ({exc}); scripts/docker-setup.sh installs and starts one")
    return client


def project_containers(engine: Any, project: str) -> list[Any]:
    """Every container (running or not) of a Compose project, by Compose's label."""
    return engine.containers.list(all=True, filters={"label": f"com.docker.compose.project={project}"})
