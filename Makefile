# The two Quick start commands (README): `make suites` and `make test`. Both set up first.
.PHONY: setup suites test bench clean

setup:
	scripts/setup.sh

suites: setup
	scripts/pytest.sh suites $(PYTEST_ARGS)

test: setup
	scripts/pytest.sh tests $(PYTEST_ARGS)

bench: setup
	.venv/bin/python bench/pdsim_throughput.py

clean:
	-.venv/bin/pdchaos down 2>/dev/null
	rm -rf .pdchaos .pytest_cache
