"""What the rig sees: the history (its records, the phases derived from them), the sampler
of every /metrics and /v1/loads, the PD pipeline's metric names, triggers on what is
sampled, smg's breakers, and growth across a soak's checkpoints."""
