PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install lint test test-slow run bench clean

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check surfacelog tests benchmarks
	$(BIN)/mypy --strict surfacelog

test: lint
	$(BIN)/pytest -q

test-slow: $(STAMP)
	$(BIN)/pytest -q -m slow

run: $(STAMP)
	$(BIN)/surfacelog run

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_surface.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache surfacelog.db surfacelog.db-wal surfacelog.db-shm
