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
