PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install lint test test-sdk test-slow run bench clean

# Python writes its bytecode caches (__pycache__/, git-ignored) even where the shell says
# not to (PYTHONDONTWRITEBYTECODE): otherwise every process of a run compiles the package
# again, each Ray worker and child surfacelog, and each xdist worker also rewrites the
# test modules' asserts (4 s of CPU before its first test).
export PYTHONDONTWRITEBYTECODE :=

# --no-compile: pip would compile every module of every package it installs (Ray's
# thousands included); a run imports a fraction of them, compiled on first import and
# cached (above). On 3 December 2026 the install took 33 s instead of 59 s (one run each,
# one after the other); the first import of everything the suite loads then cost 1.7 s
# once.
$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --no-compile -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check surfacelog tests benchmarks
	$(BIN)/mypy --strict surfacelog

# Three workers on the two cores, each with its own local Ray. With two, the cores were
# about 70% busy (the CPU of each worker's process tree against the run's wall time):
# the rest was waiting on outages, recoveries and child processes starting, which a
# third worker fills (91-99% busy, /proc/stat). Same machine: -n 2 took 374-419 s,
# -n 3 314-335 s, -n 4 447 s (before the bytecode caches above). The tests of one of
# tests/conftest.py's SERIAL_GROUPS run on one worker, one after another.
PYTEST_PARALLEL ?= -n 3
PYTEST_REPORT ?= --durations=25

test: lint
	$(BIN)/pytest -q $(PYTEST_PARALLEL) $(PYTEST_REPORT) $(TESTS)

# The agent SDKs' own session tests, unchanged, against our adapters (embedded and over
# Ray) and the SDKs' own classes (the control): tests/sdk/run_suites.py. The pinned
# sdists are fetched once into .sdk-tests/ (not in git); later runs need no network.
# make test runs them too, as one test of the suite (tests/sdk/test_upstream_session_suites.py),
# so that they overlap with the rest on the second core.
test-sdk: $(STAMP)
	$(BIN)/python tests/sdk/run_suites.py --cache .sdk-tests

# The soaks in parallel as the default run is (their multi-node ones still one after
# another, by the serial groups of tests/conftest.py): 564 s and 634 s against 893 s one
# at a time, all 13 green each time (7 December 2026).
test-slow: $(STAMP)
	$(BIN)/pytest -q -m slow $(PYTEST_PARALLEL) $(PYTEST_REPORT)

run: $(STAMP)
	$(BIN)/surfacelog run

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_surface.py

clean:
	rm -rf $(VENV) .sdk-tests .pytest_cache .mypy_cache .ruff_cache surfacelog.db surfacelog.db-wal surfacelog.db-shm
