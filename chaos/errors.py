"""The rig's errors, one tree.

ChaosError
├── RigError                 the rig could not do its job: the test *errors*
│   ├── ConfigError          bad option, stack file, defect or target name
│   ├── TargetError          a service would not start, stop or answer
│   ├── ToxiproxyError       the Toxiproxy API failed or timed out
│   │   ├── ProxyNotFound    404
│   │   └── ProxyExists      409
│   ├── FaultNotApplied      a fault's verification saw no effect
│   ├── FaultNotHealed       a heal's verification saw the fault still there
│   ├── TriggerTimeout       a trigger's condition never held before its deadline
│   └── TimeLimitHit         a test outlasted its limit (``chaos.system.limits``)
└── (verdict failures are not exceptions: they are ``Verdict`` values)
"""

from __future__ import annotations

__all__ = [
    "ChaosError",
    "ConfigError",
    "FaultNotApplied",
    "FaultNotHealed",
    "PremiseNotMet",
    "ProxyExists",
    "ProxyNotFound",
    "RigError",
    "TargetError",
    "TimeLimitHit",
    "ToxiproxyError",
    "TriggerTimeout",
]


class ChaosError(Exception):
    """Root of every error the rig raises on purpose."""


class RigError(ChaosError):
    """The rig itself failed; a test that hits this errors instead of failing."""


class ConfigError(RigError):
    """Invalid input: a bad option, stack file, defect or target name."""


class TargetError(RigError):
    """A service did not start, stop, or answer within its deadline."""


class ToxiproxyError(RigError):
    """The Toxiproxy API answered with an error or not at all."""


class ProxyNotFound(ToxiproxyError):
    """404 from Toxiproxy: no such proxy or toxic."""


class ProxyExists(ToxiproxyError):
    """409 from Toxiproxy: a proxy or toxic with that name exists."""


class FaultNotApplied(RigError):
    """A fault was injected but its verification saw no effect."""


class FaultNotHealed(RigError):
    """A fault was healed but its verification still sees it."""


class TriggerTimeout(RigError):
    """A trigger's condition did not hold before its deadline."""


class TimeLimitHit(RigError):
    """A test outlasted the limit its own waits' deadlines give it (``chaos.system.limits``): the
    message names the phase and what the rig was doing and waiting for."""


class PremiseNotMet(RigError):
    """A scenario's fault landed but not on what it was meant to break (the requests had
    already finished, say): nothing was tested, so no verdict may pass or fail on it."""
