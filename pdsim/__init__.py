"""pdsim: a CPU stand-in for an SGLang prefill or decode engine.

It speaks SGLang's PD protocol (bootstrap server, per-request handshake, KV bytes over a
real TCP link), its HTTP API, error texts and ``sglang:`` metrics, so that the chaos rig
can treat it exactly as it treats real SGLang: as a black box.
"""

__version__ = "0.1.0"
