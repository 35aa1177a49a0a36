# Every target creates .venv when it is missing, so a fresh clone needs nothing else.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev

.PHONY: install dev demo test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Reinstall when pyproject.toml changes.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $@

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.installed

install: $(VENV)/.installed  ## .venv/bin/ragpulse

dev: $(STAMP)

# The guided first run: collector + example app in three modes (writes ./ragpulse-demo.duckdb).
demo: $(VENV)/.installed
	$(BIN)/ragpulse demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: lint
	$(BIN)/pytest -q -p no:cacheprovider

bench: $(STAMP)
	$(BIN)/python bench/ingest.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
