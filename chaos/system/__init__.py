"""The operating system under the rig: processes and their groups, ports, network
namespaces and the bridge into them, shared memory, time limits, GPUs, the cleanup that runs
whatever happens, and bounded waits. Imports nothing of the rig above it."""
