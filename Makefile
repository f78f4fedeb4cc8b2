# make demo: install into .venv, run a small sweep on whatever hardware is here, write its report.
# make test: install into .venv, run ruff and the whole test suite (no GPU needed; what CI runs).
# make test-fast: ruff and every test not marked slow (nothing that trains, sweeps or spawns
#   torchrun/gloo), for developers: under a minute on 2 cores.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The torch build to install. These are the versions CI uses; override for another CUDA build.
TORCH_SPEC ?= torch==2.14.1 torchvision==0.29.1
STAMP := $(VENV)/.wattlab-installed
DEMO_DB ?= demo-out/wattlab.db
DEMO_OUT ?= demo-out/report

.PHONY: install demo test test-fast lint format clean

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q $(TORCH_SPEC)
	$(BIN)/python -m pip install -q -e ".[train,codecarbon,parquet,dev]"
	touch $(STAMP)

demo: $(STAMP)
	mkdir -p demo-out
	$(BIN)/wattlab devices
	$(BIN)/wattlab sweep quickstart --device auto --db $(DEMO_DB)
	$(BIN)/wattlab report --db $(DEMO_DB) --sweep quickstart --out $(DEMO_OUT)
	@echo "Report: $(DEMO_OUT)/report.html (and report.md)"

lint: $(STAMP)
	$(BIN)/ruff check wattlab tests bench
	$(BIN)/ruff format --check wattlab tests bench

test: lint
	$(BIN)/python -m pytest -q tests

test-fast: lint
	$(BIN)/python -m pytest -q -m "not slow" tests

format: $(STAMP)
	$(BIN)/ruff format wattlab tests bench
	$(BIN)/ruff check --fix wattlab tests bench

clean:
	rm -rf $(VENV) demo-out .pytest_cache .ruff_cache
