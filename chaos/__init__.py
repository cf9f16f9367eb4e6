"""pd-chaos: the chaos rig for prefill/decode disaggregated SGLang serving.

Its wings, from the bottom up (a wing imports only those below it):

- ``system``: processes, ports, namespaces, limits, cleanup, bounded waits;
- ``observe``: the history, the sampler, the pipeline's metric names, triggers;
- ``clients``, ``targets``, ``faults``: what drives the stack, what runs it, what breaks it;
- ``judge`` (read through ``verdicts``): verdicts and premises over a history;
- ``run``, ``explore``, ``doctor``, ``reports``: the suites' kit and plugin, random
  schedules, live forensics, what a run leaves to read; ``cli`` over all of them.

Never imports ``pdsim``: the rig sees every target, pdsim included, as a black box.
"""

from chaos.errors import ChaosError, ConfigError, RigError, TargetError, ToxiproxyError
from chaos.targets import Capability, EmbeddedStack, Target
from chaos.targets.stack import StackConfig, StackInfo, Timeouts
from chaos.targets.toxiproxy import Toxic, ToxiproxyClient

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
