# Two commands do all the set-up on a fresh machine:
#   make demo   pretrain the tiny default BERT on the bundled corpus and print where its outputs went
#   make test   run the test suite
# Both create .venv, install PyTorch pinned first (an unpinned torch would pull GBs of CUDA packages where a CPU
# wheel is wanted), then this package with its test extras.

PYTHON ?= python3
VENV ?= .venv
TORCH_VERSION ?= 2.13.0
BIN := $(VENV)/bin
STAMP := $(VENV)/.plm_toolkit-installed

.PHONY: setup demo test lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install "torch==$(TORCH_VERSION)"
	$(BIN)/python -m pip install -e ".[test]"
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(BIN)/plm-train hydra.run.dir=runs/demo-$$(date +%Y%m%d-%H%M%S)

test: setup
	$(BIN)/python -m pytest -q -ra

lint: setup
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

clean:
	rm -rf runs outputs multirun .pytest_cache
