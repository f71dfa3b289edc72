"""Fixtures for end-to-end runs: a small corpus cut from the bundled one, and Hydra composition."""

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module

import plm_toolkit.commands.train  # noqa: F401  (registers schemas, registries and resolvers)
from plm_toolkit.core.resources import resource_path

# Every step logged, no evaluation unless asked, no progress bar or TensorBoard, on the CPU.
QUIET = [
    "trainer.log_every=1",
    "trainer.eval_every=0",
    "trainer.progress_bar=false",
    "trainer.tensorboard=false",
    "hardware=cpu",
]
# Tiny BERT with odd sizes: shape bugs cannot hide behind equal numbers.
TINY = [
    "model=bert_tiny",
    "model.hidden_size=36",
    "model.num_layers=2",
    "model.num_heads=3",
    "model.intermediate_size=37",
    "model.max_position_embeddings=64",
    "data.max_seq_len=48",
    "data.tokenizer.vocab_size=600",
    "trainer.batch_size=8",
    *QUIET,
]


@pytest.fixture(scope="session")
def small_corpus(tmp_path_factory) -> dict[str, str]:
    """About 60 KB of the bundled WikiText excerpt, split into train and validation files."""
    root = tmp_path_factory.mktemp("corpus")
    docs = Path(resource_path("corpora/wikitext2/train.txt")).read_text().split("\n\n")
    (root / "train.txt").write_text("\n\n".join(docs[:20])[:60000])
    (root / "valid.txt").write_text("\n\n".join(docs[20:24])[:8000])
    cache = tmp_path_factory.mktemp("cache")
    return {"train": str(root / "train.txt"), "valid": str(root / "valid.txt"), "cache": str(cache)}


@pytest.fixture
def make_config(small_corpus):
    def make(*overrides: str, tiny: bool = True):
        base = [
            "data=text_files",
            f"data.train_files=[{small_corpus['train']}]",
            f"data.validation_files=[{small_corpus['valid']}]",
            f"data.cache_dir={small_corpus['cache']}",
        ]
        with initialize_config_module(config_module="plm_toolkit.configs", version_base="1.3"):
            return compose("train", overrides=(TINY if tiny else []) + base + list(overrides))

    return make


def read_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]


def train_records(run_dir: Path) -> list[dict]:
    """The training steps' records of metrics.jsonl (an evaluation's, at the end of training too, left out)."""
    return [record for record in read_metrics(run_dir) if "lr" in record]


# GPT-2 with odd sizes, on the same small corpus.
GPT2_SMALL = [
    "model=gpt2",
    "model.hidden_size=36",
    "model.num_layers=2",
    "model.num_heads=3",
    "model.intermediate_size=37",
    "model.max_position_embeddings=64",
    "data.max_seq_len=32",
    "data.tokenizer.vocab_size=600",
    "trainer.batch_size=8",
    "optimizer.lr=3e-3",
]


@pytest.fixture(scope="session")
def gpt_run(small_corpus, tmp_path_factory) -> Path:
    """60 steps of model=gpt2 (tiny, odd sizes) ending with an evaluation: a plm-train run directory."""
    import plm_toolkit.commands.train as train

    run_dir = tmp_path_factory.mktemp("gpt2")
    base = [
        "data=text_files",
        f"data.train_files=[{small_corpus['train']}]",
        f"data.validation_files=[{small_corpus['valid']}]",
        f"data.cache_dir={small_corpus['cache']}",
    ]
    quiet = [o for o in TINY if not o.startswith(("model", "data", "trainer.batch_size"))]
    with initialize_config_module(config_module="plm_toolkit.configs", version_base="1.3"):
        cfg = compose("train", overrides=[*quiet, *GPT2_SMALL, *base, "trainer.max_steps=60", "trainer.eval_every=60"])
    train.run(cfg, run_dir)
    return run_dir


def generate_config(*overrides: str):
    """plm-generate's config, composed as its command line would."""
    with initialize_config_module(config_module="plm_toolkit.configs", version_base="1.3"):
        return compose("generate", overrides=list(overrides))


@pytest.fixture
def inductor_settings():
    """Inductor's process-wide settings that ``configure_compiler`` changes, put back after the test (monkeypatch
    cannot: undoing a setattr on torch's config module deletes the setting)."""
    from torch._inductor import config

    with config.patch(fallback_random=config.fallback_random):
        yield
