# make demo: install what the demo needs into .venv (.[train,codecarbon]), run a small sweep on
#   whatever hardware is here, write its report.
# make test: install the dev set into .venv (.[train,codecarbon,parquet,dev]), run ruff, mypy and
#   every test, fast and slow, in parallel (no GPU needed); it fails when TEST_BUDGET_S cut the
#   tests short, and says so apart from a Ctrl-C.
# make ci: make test, then the floors job (make test-floors); what .ci/run runs.
# make test-fast: ruff, mypy and every test not marked slow (nothing that trains, sweeps or spawns
#   torchrun/gloo), for developers: pytest-xdist, one worker per core.
# make test-floors: the package alone at the lowest versions pyproject.toml allows
#   (uv's --resolution lowest-direct) in .venv-floor, no extra: the CLI's smoke tests and every
#   fast test that needs no extra (the others are skipped there, each naming its extra).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The torch build to install. These are the versions CI uses; override for another CUDA build.
TORCH_SPEC ?= torch==2.14.1 torchvision==0.29.1
# Two install stamps: the demo's set, and the dev set (which holds the demo's).
DEMO_STAMP := $(VENV)/.wattlab-demo-installed
STAMP := $(VENV)/.wattlab-dev-installed
FLOOR_VENV ?= .venv-floor
FLOOR_STAMP := $(FLOOR_VENV)/.wattlab-installed
# The direct dependencies taken as wheels in the floors job: on a Python newer than a floor's
# wheels (numpy 1.24 has none for 3.12) uv takes the lowest version that has one.
FLOOR_WHEELS := numpy pandas matplotlib scikit-learn scipy pydantic pyyaml rich psutil
DEMO_DB ?= demo-out/wattlab.db
DEMO_OUT ?= demo-out/report
DEMO_SPEC ?=

.PHONY: install demo test ci test-fast test-floors lint format clean

install: $(STAMP)

# torch is installed once: an environment that already has torch and torchvision (VENV=... an
# environment you train in, or a .venv made before) keeps them; only a new one gets TORCH_SPEC.
$(DEMO_STAMP): pyproject.toml Makefile
	@if [ ! -x $(BIN)/python ]; then echo "$(PYTHON) -m venv $(VENV)"; $(PYTHON) -m venv $(VENV); fi
	@if $(BIN)/python -c "import torch, torchvision" 2>/dev/null; then \
	  echo "torch: $$($(BIN)/python -c 'import torch; print(torch.__version__)') already in $(VENV), kept"; \
	else echo "$(BIN)/python -m pip install -q $(TORCH_SPEC)"; \
	  $(BIN)/python -m pip install -q $(TORCH_SPEC); fi
	$(BIN)/python -m pip install -q -e ".[train,codecarbon]"
	touch $(DEMO_STAMP)

$(STAMP): $(DEMO_STAMP)
	$(BIN)/python -m pip install -q -e ".[train,codecarbon,parquet,dev]"
	touch $(STAMP)

# uv (from the dev set) makes .venv-floor with this Python and installs the package at the
# floors (each direct dependency at the lowest version its range allows), pytest, xdist and
# Hypothesis (the test tools, at their own floors)
$(FLOOR_STAMP): $(STAMP)
	rm -rf $(FLOOR_VENV)
	$(BIN)/uv venv -q --python $(BIN)/python $(FLOOR_VENV)
	$(BIN)/uv pip install -q --python $(FLOOR_VENV)/bin/python --resolution lowest-direct \
	  $(foreach p,$(FLOOR_WHEELS),--only-binary $(p)) -e . "pytest>=8" "pytest-xdist>=3.5" "hypothesis>=6.100"
	touch $(FLOOR_STAMP)

# The demo's grid depends on the hardware: demo-gpu (ResNet-18, fp32 vs bf16 autocast) where
# torch sees a CUDA GPU, else demo-cpu (sized for 2 CPU cores: 2 min 58 s from a fresh clone,
# install included, on 2 idle cores, 4 min 13 s beside 2 busy loops; docs/engine.md "The
# demo"). DEMO_SPEC=... picks another preset or spec file.
demo: $(DEMO_STAMP)
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

# make test: every test, fast and slow (training, sweeps, torchrun/gloo, SLURM, real
# MLflow/Transformers/Lightning), in one pytest-xdist session of one worker per core; each worker
# and what it starts trains with its share of the cores, and the session shares one cache folder
# (tests/conftest.py). TEST_BUDGET_S caps the session so a hung test cannot hold CI forever:
# when the limit cuts it short, make test FAILS and says so (a cut suite is not a passed one).
# On 2 idle cores it took 14 min 2 s once installed, its tests 13 min 57 s
# (docs/measured/cpu-make-test-installed-2026-12-05.txt); from a fresh clone 17 min 58 s.
# make ci: make test and the floors job (make test-floors), what .ci/run runs.
TEST_BUDGET_S ?= 3600
test: lint
	@log=$$(mktemp); \
	timeout --signal=INT $(TEST_BUDGET_S) $(BIN)/python -m pytest -q -n auto --dist loadfile \
	  --durations=15 tests 2>&1 | tee $$log; code=$${PIPESTATUS[0]}; \
	if [ $$code -eq 124 ]; then \
	  echo "make test: FAILED: the tests ran past TEST_BUDGET_S=$(TEST_BUDGET_S) s and were cut"; \
	  echo "short; the tests not shown as passed or failed above did not run"; exit 1; \
	elif grep -q "^!\+ KeyboardInterrupt !\+$$" $$log; then \
	  echo "make test: STOPPED: the tests were interrupted (Ctrl-C or another SIGINT), not"; \
	  echo "cut by TEST_BUDGET_S; the tests not shown as passed or failed above did not run"; exit 130; \
	fi; exit $$code

ci: test
	$(MAKE) --no-print-directory test-floors

test-fast: lint
	$(BIN)/python -m pytest -q -m "not slow" -n auto tests

# --without-extras: a test that needs an extra not installed here is skipped and names it
# (tests/conftest.py); any other failure fails the job. The versions it ran with come first.
test-floors: $(FLOOR_STAMP)
	@$(BIN)/uv pip list --python $(FLOOR_VENV)/bin/python 2>/dev/null | \
	  grep -iE "^(numpy|pandas|matplotlib|scikit-learn|scipy|pydantic|pyyaml|typer|click|rich|nvidia-ml-py|psutil) " | \
	  tr -s " " | tr "\n" " "; echo
	$(FLOOR_VENV)/bin/python -m pytest -q -m "not slow" -n auto --without-extras tests
	$(FLOOR_VENV)/bin/python -m pytest -q -m slow --without-extras -rs tests/cli/test_cli_smoke.py

format: $(STAMP)
	$(BIN)/ruff format wattlab tests bench
	$(BIN)/ruff check --fix wattlab tests bench

clean:
	rm -rf $(VENV) $(FLOOR_VENV) demo-out .pytest_cache .ruff_cache
