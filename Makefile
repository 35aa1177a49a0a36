# Every target creates .venv when it is missing, so a fresh clone needs nothing else.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev
# setuptools warns on every editable install that a folder named like the package may shadow it (ours
# is the package itself): a banner in `make demo`'s first lines, quieted by its message only.
PIP_INSTALL := PYTHONWARNINGS="ignore:Editable installation" $(BIN)/pip install --quiet
COMPILED_STAMP := $(VENV)/.compiled

.PHONY: install dev compile demo test lint wheel-check bench screenshots clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Reinstall when pyproject.toml or setup.py changes (the install compiles the mapping: setup.py).
$(VENV)/.installed: pyproject.toml setup.py | $(BIN)/python
	$(PIP_INSTALL) -e .
	touch $@

# LlamaIndex's OpenAI LLM for tests/frameworks/test_agents_llamaindex.py, without its `openai<3` cap (pyproject.toml).
LLAMA_INDEX_OPENAI := llama-index-llms-openai==0.8.3

$(STAMP): pyproject.toml setup.py | $(BIN)/python
	$(PIP_INSTALL) -e '.[dev]'
	$(BIN)/pip install --quiet --no-deps '$(LLAMA_INDEX_OPENAI)'
	touch $@ $(VENV)/.installed $(COMPILED_STAMP)

install: $(VENV)/.installed  ## .venv/bin/ragpulse

dev: $(STAMP)

# The mapping's modules compiled in place with mypyc (setup.py), again after any of them changes.
$(COMPILED_STAMP): $(wildcard semconv/*.py semconv/mappers/*.py) | $(STAMP)
	$(PIP_INSTALL) --no-deps -e .
	touch $@

compile: $(COMPILED_STAMP)

# The guided first run: collector + example app in three modes (writes ./ragpulse-demo.duckdb).
# `make demo ARGS=--serve` then keeps serving it: the dashboard at http://127.0.0.1:4318/.
demo: $(VENV)/.installed
	$(BIN)/ragpulse demo $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# On two processes (pytest-xdist): 12 minutes instead of 21 serially on the 2-core machine. The tests
# timed under load and those that load both cores are marked `xdist_group("heavy")`: `loadgroup`
# runs them on one process, never beside each other.
test: lint $(COMPILED_STAMP)
	$(BIN)/pytest -q -p no:cacheprovider -n 2 --dist loadgroup

# The wheel as users install it: built from scratch (setuptools leaves build/lib's files of modules
# since moved or deleted, and the next wheel would ship them), its contents checked
# (check-wheel-contents, configured in pyproject.toml), installed into a clean venv where
# `ragpulse demo` must run: its collector, example app and local model server, offline.
wheel-check: $(STAMP)
	rm -rf build/wheel build/lib.* build/bdist.*
	$(BIN)/pip wheel --no-deps --quiet -w build/wheel .
	$(BIN)/check-wheel-contents build/wheel
	tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
		$(PYTHON) -m venv "$$tmp/venv" && \
		"$$tmp/venv/bin/pip" install --quiet build/wheel/ragpulse-*.whl && \
		cd "$$tmp" && venv/bin/ragpulse demo --db "$$tmp/demo.duckdb"

bench: $(STAMP)
	$(BIN)/python bench/ingest.py

# The dashboard's pictures in docs/images: the browser tests save each page they look at.
screenshots: $(STAMP)
	RAGPULSE_SCREENSHOTS=docs/images $(BIN)/pytest -q -p no:cacheprovider \
		tests/collector/dashboard/test_dashboard_ui.py tests/collector/dashboard/test_dashboard_slices_ui.py \
		tests/collector/dashboard/test_dashboard_review_ui.py tests/collector/dashboard/test_dashboard_sessions_ui.py \
		tests/collector/dashboard/test_dashboard_rescore_ui.py \
		tests/collector/dashboard/test_dashboard_agents_ui.py tests/collector/dashboard/test_dashboard_timeline_ui.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache build
	find semconv -name '*.so' -delete; rm -f ragpulse_semconv__mypyc*.so
