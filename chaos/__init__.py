"""pd-chaos: the chaos rig for prefill/decode disaggregated SGLang serving.

Never imports ``pdsim``: the rig sees every target, pdsim included, as a black box.
"""

from chaos.errors import ChaosError, ConfigError, RigError, TargetError, ToxiproxyError
from chaos.stack import StackConfig, StackInfo, Timeouts
from chaos.targets import Capability, EmbeddedStack, Target
from chaos.toxiproxy import Toxic, ToxiproxyClient

__all__ = [
    "Capability",
    "ChaosError",
    "ConfigError",
    "EmbeddedStack",
    "RigError",
    "StackConfig",
    "StackInfo",
    "Target",
    "TargetError",
    "Timeouts",
    "Toxic",
    "ToxiproxyClient",
    "ToxiproxyError",
]
