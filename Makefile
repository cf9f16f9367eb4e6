# The two Quick start commands (README): `make suites` and `make test`. Both set up first.
.PHONY: setup setup-sglang docker suites suites-sglang suites-compose gpu-pull gpu-model suites-gpu test mutants explore leftovers bench clean

setup:
	scripts/setup.sh

# Real SGLang on CPU: its venv, Mooncake's libraries and the tiny model under .tools/sglang
# (about 7 GB, 2 minutes on a fresh machine).
setup-sglang: setup
	scripts/setup-sglang.sh

# Docker engine (no bridge), Compose v2, the offline base image and the CPU image.
docker: setup
	scripts/docker-setup.sh

suites: setup
	scripts/pytest.sh suites $(PYTEST_ARGS)

# The same suites against real SGLang prefill and decode engines on CPU.
suites-sglang: setup-sglang
	scripts/pytest.sh suites --target sglang-cpu $(PYTEST_ARGS)

# The same suites against the CPU compose stack (containers, host networking).
suites-compose: docker
	scripts/pytest.sh suites --target compose $(PYTEST_ARGS)

# Real SGLang on GPUs (docs/gpu.md): on a host with its own Docker, NVIDIA driver and toolkit.
# PDCHAOS_TARGET=compose-gpu-rdma for Mooncake over RDMA; PDCHAOS_GPUS lists the GPUs to use.
gpu-pull: setup
	scripts/gpu.sh pull

gpu-model: setup
	scripts/gpu.sh model

# The nightly job: `pdchaos gpu-check` first (nothing starts unless the host can run it), then
# the suites; reports in reports/$$PDCHAOS_RUN_ID/ (junit.xml, summary.md, engine logs).
suites-gpu: setup
	scripts/gpu.sh suites $(PYTEST_ARGS)

# ruff and mypy first (scripts/check.sh); then two workers (this machine has two cores),
# tests of real SGLang staying on one of them.
test: setup docker
	scripts/check.sh
	scripts/pytest.sh tests -n 2 --dist loadgroup $(PYTEST_ARGS)

mutants: setup
	.venv/bin/pdchaos mutants --json reports/mutants.json

# Seeded random fault schedules on the embedded stack, judged by the universal invariants
# (docs/explore.md); CI's short run must find nothing. EXPLORE_BUDGET: a time or episodes.
EXPLORE_BUDGET ?= 2m
EXPLORE_SEED ?= 1
explore: setup
	scripts/pytest.sh suites/test_explore.py --explore $(EXPLORE_BUDGET) --seed $(EXPLORE_SEED) $(PYTEST_ARGS)

# Nothing pd-chaos started may be left: processes, containers, networks, dangling images.
leftovers:
	scripts/leftovers.sh

bench: setup
	.venv/bin/python bench/pdsim_throughput.py
	.venv/bin/python bench/suite_times.py --matrix
	.venv/bin/python bench/target_costs.py

clean:
	-.venv/bin/pdchaos down 2>/dev/null
	rm -rf .pdchaos .pytest_cache
