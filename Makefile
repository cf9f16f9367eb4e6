# The two Quick start commands (README): `make suites` and `make test`. Both set up first.
.PHONY: setup suites test mutants bench clean

setup:
	scripts/setup.sh

suites: setup
	scripts/pytest.sh suites $(PYTEST_ARGS)

test: setup
	scripts/pytest.sh tests $(PYTEST_ARGS)

mutants: setup
	.venv/bin/pdchaos mutants --json reports/mutants.json

bench: setup
	.venv/bin/python bench/pdsim_throughput.py
	.venv/bin/python bench/suite_times.py --matrix

clean:
	-.venv/bin/pdchaos down 2>/dev/null
	rm -rf .pdchaos .pytest_cache
