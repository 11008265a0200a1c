# The two set-up commands of the README. Both start from nothing but python3 (3.11+).
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip

.PHONY: run install test test-fast bench

$(PY):
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# torch is pinned first so pip takes the CPU build instead of resolving a multi-GB CUDA one.
install: $(PY)
	$(PIP) install -q "torch==2.13.0"
	$(PIP) install -q -e ".[dev,bench]"

# Installs, then indexes this repository with the embedded default model.
run: install
	$(VENV)/bin/repoctx index build .
	$(VENV)/bin/repoctx index status .

# Lint, the layer contract, then the test suite.
test: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/pytest

# The fast lane while developing (under a minute): no Ray, no real model, no process-kill tests.
# Run `make install` (or `make test`) once first.
test-fast: $(PY)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/pytest -m "not slow"
