"""Targets: where the services under test run and how the rig controls them."""

from chaos.targets.base import Capability, Target
from chaos.targets.embedded import EmbeddedStack

__all__ = ["Capability", "EmbeddedStack", "Target"]
