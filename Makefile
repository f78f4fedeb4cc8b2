# make demo: install into .venv, run a small sweep on whatever hardware is here, write its report.
# make test: install into .venv, run ruff, mypy and the whole test suite (no GPU needed; what CI runs);
#   it fails when SLOW_BUDGET_S cut the slow tests short.
# make test-fast: ruff, mypy and every test not marked slow (nothing that trains, sweeps or spawns
#   torchrun/gloo), for developers: under a minute on 2 cores (pytest-xdist, one worker per core).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The torch build to install. These are the versions CI uses; override for another CUDA build.
TORCH_SPEC ?= torch==2.14.1 torchvision==0.29.1
STAMP := $(VENV)/.wattlab-installed
DEMO_DB ?= demo-out/wattlab.db
DEMO_OUT ?= demo-out/report
DEMO_SPEC ?=

.PHONY: install demo test test-fast lint format clean

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q $(TORCH_SPEC)
	$(BIN)/python -m pip install -q -e ".[train,codecarbon,parquet,dev]"
	touch $(STAMP)

# The demo's grid depends on the hardware: demo-gpu (ResNet-18, fp32 vs bf16 autocast) where
# torch sees a CUDA GPU, else demo-cpu (sized for 2 CPU cores, about 3 minutes). DEMO_SPEC=...
# picks another preset or spec file.
demo: $(STAMP)
	mkdir -p demo-out
	$(BIN)/wattlab devices
	@spec="$(DEMO_SPEC)"; \
	if [ -z "$$spec" ]; then \
	  spec=$$($(BIN)/python -c "import torch; print('demo-gpu' if torch.cuda.is_available() else 'demo-cpu')"); \
	fi; \
	echo "demo: sweep $$spec"; \
	$(BIN)/wattlab sweep $$spec --db $(DEMO_DB) && \
	$(BIN)/wattlab report --db $(DEMO_DB) --sweep $$(basename $$spec .yaml) --out $(DEMO_OUT)
	@echo "Report: $(DEMO_OUT)/report.html (and report.md)"

# ruff, then mypy on wattlab/ at the settings of [tool.mypy] in pyproject.toml (no error allowed)
lint: $(STAMP)
	$(BIN)/ruff check wattlab tests bench
	$(BIN)/ruff format --check wattlab tests bench
	$(BIN)/mypy

# make test: every test. The fast ones first (they must all pass); then the slow ones (training,
# sweeps, torchrun/gloo, SLURM, real MLflow/Transformers/Lightning) under a time limit,
# SLOW_BUDGET_S, so a hung test cannot hold CI forever. Every slow test must run: when the limit
# cuts the slow suite short, make test FAILS and says which part did not run (a cut suite is not
# a passed one). The whole suite takes about 20 minutes on 2 cores, well inside CI's 90.
SLOW_BUDGET_S ?= 3600
test: lint
	$(BIN)/python -m pytest -q -m "not slow" -n auto tests
	@log=$$(mktemp); \
	timeout --signal=INT $(SLOW_BUDGET_S) $(BIN)/python -m pytest -q -m slow --durations=15 \
	  tests 2>&1 | tee $$log; code=$${PIPESTATUS[0]}; \
	if [ $$code -eq 124 ] || grep -q "^!\+ KeyboardInterrupt !\+$$" $$log; then \
	  echo "make test: FAILED: the slow tests ran past SLOW_BUDGET_S=$(SLOW_BUDGET_S) s and were cut"; \
	  echo "short; the tests after the last one shown above did not run"; exit 1; \
	fi; exit $$code

test-fast: lint
	$(BIN)/python -m pytest -q -m "not slow" -n auto tests

format: $(STAMP)
	$(BIN)/ruff format wattlab tests bench
	$(BIN)/ruff check --fix wattlab tests bench

clean:
	rm -rf $(VENV) demo-out .pytest_cache .ruff_cache
