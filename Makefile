# Troupe — developer commands. Everything installs into .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test lint bench demo manifests-check clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,dev]'
	@# promtool checks the metrics exposition (Debian's prometheus package ships it);
	@# where it cannot be installed, the test suite's own lint of promtool's rules runs alone.
	@command -v promtool >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
		&& (apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus >/dev/null) \
		|| echo "promtool not installed: tests/unit/test_metrics.py lints with promtool's rules only"; }
	touch $(STAMP)

test: install
	$(BIN)/python -m pytest

lint: install
	$(BIN)/ruff check scheduler tests
	$(BIN)/ruff format --check scheduler tests
	$(BIN)/mypy

bench: install
	@# Bytecode as a pip install compiles it: an editable install under
	@# PYTHONDONTWRITEBYTECODE would compile every module again in each process timed.
	$(BIN)/python -m compileall -q scheduler
	$(BIN)/python -m tests.perf.bench $(BENCH_ARGS)
	$(BIN)/python -m tests.perf.e2e
	$(BIN)/python -m tests.perf.simulate_bench

demo: install
	$(BIN)/python -m tests.demo $(DEMO_ARGS)

manifests-check: install
	$(BIN)/python -m tests.manifests_check

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
