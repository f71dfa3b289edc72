"""Fixtures for fine-tuning tests: a tiny odd-sized BERT saved as a plm-train checkpoint, and Hydra composition."""

from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf
from tokenizers import Tokenizer, models, trainers
from torch import nn

import plm_toolkit.commands.finetune  # noqa: F401  (registers schemas, registries and resolvers)
from plm_toolkit.core import checkpoint as ckpt
from plm_toolkit.core.resources import resource_path
from plm_toolkit.data.tokenization.pipelines import SPECIAL_TOKENS, _add_specials, bert_tokenizer
from plm_toolkit.models.bert import Bert, BertConfig

SST2_TRAIN = resource_path("corpora/sst2/train.tsv")
SST2_DEV = resource_path("corpora/sst2/dev.tsv")
# The tests count their runs in steps (trainer.max_steps=N); plm-finetune's own default is trainer.epochs=3.
QUIET = [
    "trainer.progress_bar=false",
    "trainer.tensorboard=false",
    "trainer.log_every=1",
    "hardware=cpu",
    "trainer.epochs=null",
]


def tiny_tokenizer(texts: list[str], vocab_size: int = 700) -> Tokenizer:
    tokenizer = bert_tokenizer(models.WordPiece(unk_token="[UNK]"), lowercase=True)
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), continuing_subword_prefix="##", show_progress=False
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    _add_specials(tokenizer)
    return tokenizer


def save_tiny_checkpoint(run_dir: Path, tokenizer: Tokenizer, max_positions: int = 128) -> Path:
    """A random tiny BERT (hidden 36, 3 heads, intermediate 37) written as plm-train writes its checkpoints."""
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=tokenizer.get_vocab_size(),
        hidden_size=36,
        num_layers=2,
        num_heads=3,
        intermediate_size=37,
        max_position_embeddings=max_positions,
    )
    model = Bert(config)
    yaml = OmegaConf.to_yaml({"model": OmegaConf.to_container(OmegaConf.structured(config))})
    state = {"step": 0, "samples_seen": 0}
    return ckpt.save_checkpoint(run_dir, 1, model, nn.Module(), state, yaml, tokenizer.to_str(), keep_last=0)


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory) -> Path:
    """Its vocabulary is trained on the bundled SST-2 slice and the bundled WikiText excerpt."""
    texts = [line.split("\t")[0] for line in Path(SST2_TRAIN).read_text().splitlines()[1:]]
    texts += Path(resource_path("corpora/wikitext2/train.txt")).read_text().splitlines()[:3000]
    return save_tiny_checkpoint(tmp_path_factory.mktemp("pretrained"), tiny_tokenizer(texts))


@pytest.fixture
def finetune_config(tiny_checkpoint):
    def make(*overrides: str):
        base = [f"model.checkpoint={tiny_checkpoint}", *QUIET]
        with initialize_config_module(config_module="plm_toolkit.configs", version_base="1.3"):
            return compose("finetune", overrides=base + list(overrides))

    return make
