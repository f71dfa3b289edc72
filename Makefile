# Two commands do all the set-up on a fresh machine:
#   make demo   pretrain a tiny BERT on the bundled corpus, fine-tune it as a part-of-speech tagger on a bundled UD
#               slice beside the same fine-tuning from random weights, and print the curves, the gain and where the
#               outputs went
#   make test   run the test suite (two workers; the long end-to-end cases are `make test-slow`, which CI runs too)
# Both create .venv, install PyTorch pinned first (an unpinned torch would pull GBs of CUDA packages where a CPU
# wheel is wanted), then this package with its test extras.

PYTHON ?= python3
VENV ?= .venv
TORCH_VERSION ?= 2.13.0
DEMO_FINETUNE_SENTENCES ?= 1000
DEMO_FINETUNE_EPOCHS ?= 5
DEMO_FINETUNE_LR ?= 1e-3
BIN := $(VENV)/bin
STAMP := $(VENV)/.plm_toolkit-installed

.PHONY: setup demo test test-slow lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install "torch==$(TORCH_VERSION)"
	$(BIN)/python -m pip install -e ".[test]"
	touch $(STAMP)

setup: $(STAMP)

# Pretrain the tiny BERT (experiment=demo_cpu), fine-tune it as a UPOS tagger on the bundled UD English-EWT slice
# (plm_toolkit/corpora/ud_ewt/), fine-tune the same architecture from random weights beside it, and print the curves
# and the gain (scripts/demo.py).
demo: setup
	$(BIN)/python scripts/demo.py runs/demo-$$(date +%Y%m%d-%H%M%S) \
		--finetune-sentences $(DEMO_FINETUNE_SENTENCES) --finetune-epochs $(DEMO_FINETUNE_EPOCHS) \
		--finetune-lr $(DEMO_FINETUNE_LR)

# Two workers on a 2-core machine (tests/conftest.py gives each one thread), a test file to a worker.
PYTEST := $(BIN)/python -m pytest -q -ra -n 2 --dist loadfile

test: setup
	$(PYTEST) -m "not slow"

# The cases marked slow (multi-process runs, real checkpoints, whole bad-input corpora): CI's second step.
test-slow: setup
	$(PYTEST) -m slow

lint: setup
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

clean:
	rm -rf runs outputs multirun .pytest_cache
