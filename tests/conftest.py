import hashlib
import os
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from tokenizers import Tokenizer, models, trainers
from torch import nn

from plm_toolkit.config import setup
from plm_toolkit.core import checkpoint as ckpt
from plm_toolkit.core.resources import resource_path
from plm_toolkit.data.tokenization.pipelines import (
    BPE_SPECIAL_TOKENS,
    _add_bpe_specials,
    byte_level_tokenizer,
    unigram_tokenizer,
)
from plm_toolkit.data.tokenization.sentinels import add_sentinels, t5_unigram_trainer
from plm_toolkit.models.t5 import T5, T5Config
from plm_toolkit.models.transformer import Transformer, TransformerConfig

# Schemas, registries and resolvers, as the entry points set them up before Hydra composes.
setup()

if os.environ.get("PYTEST_XDIST_WORKER"):
    # `make test` runs two workers on a 2-core machine: one thread each (and for the commands they launch), so that
    # they share the cores instead of fighting over them.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("PLM_SHARED_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture
def shared_data() -> Path:
    """../shared/data beside the checkout; tests that need it skip cleanly where it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


def tokenizer_texts() -> list[str]:
    """The bundled SST-2 sentences, a WikiText excerpt and, where the shared data is, English and German pairs."""
    sst2 = Path(resource_path("corpora/sst2/train.tsv")).read_text().splitlines()[1:]
    texts = [line.split("\t")[0] for line in sst2]
    texts += Path(resource_path("corpora/wikitext2/train.txt")).read_text().splitlines()[:2000]
    en_de = SHARED_DATA / "translation" / "en-de"
    if en_de.is_dir():
        for lang in ("en", "de"):
            texts += (en_de / f"train.{lang}").read_text(encoding="utf-8").splitlines()[:3000]
    return texts


def tree_digest(root: Path) -> dict[str, str]:
    """Each file's sha256, each link's target and each folder under ``root``: equal digests, an untouched tree."""
    out = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        if path.is_symlink():
            out[key] = "-> " + os.readlink(path)
        elif path.is_file():
            out[key] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            out[key] = "folder"
    return out


def save_untrained(root: Path, model: nn.Module, tokenizer: Tokenizer, objective: str | None = None) -> Path:
    """``model`` written as plm-train writes a checkpoint (step 1), with ``objective`` named in its config.yaml."""
    sections = {"model": OmegaConf.to_container(OmegaConf.structured(model.config))}
    if objective is not None:
        sections["objective"] = {"name": objective}
    state = {"step": 0, "samples_seen": 0}
    return ckpt.save_checkpoint(root, 1, model, nn.Module(), state, OmegaConf.to_yaml(sections), tokenizer.to_str(), 0)


def save_finetuned(root: Path, model: nn.Module, task: nn.Module, tokenizer: Tokenizer) -> Path:
    """``model`` and ``task`` written as plm-finetune writes a checkpoint (step 1): the task's head in
    objective.safetensors, the backbone's architecture, the task's config and the head's record in config.yaml."""
    from plm_toolkit.interop.finetuned_head import HEAD_SECTION
    from plm_toolkit.tasks.checkpoint_head import head_record

    sections = {
        "backbone": OmegaConf.to_container(OmegaConf.structured(model.config)),
        "task": OmegaConf.to_container(OmegaConf.structured(task.config)),
        HEAD_SECTION: head_record(task),
    }
    state = {"step": 1, "samples_seen": 0}
    return ckpt.save_checkpoint(root, 1, model, task, state, OmegaConf.to_yaml(sections), tokenizer.to_str(), 0)


@pytest.fixture(scope="session")
def bpe_tokenizer() -> Tokenizer:
    """A byte-level BPE of 800 tokens with RoBERTa's special tokens (<s> <pad> </s> <unk> <mask>)."""
    tokenizer = byte_level_tokenizer(models.BPE())
    trainer = trainers.BpeTrainer(vocab_size=800, special_tokens=list(BPE_SPECIAL_TOKENS), show_progress=False)
    tokenizer.train_from_iterator(tokenizer_texts(), trainer=trainer)
    _add_bpe_specials(tokenizer)
    return tokenizer


def tiny_transformer(tokenizer: Tokenizer, share_embeddings: bool = True) -> Transformer:
    """A random tiny Transformer (hidden 36, 3 heads, d_ff 37, 128 positions) over ``tokenizer``. A random tied
    output layer mostly repeats its input token; an untied one decodes varied text."""
    torch.manual_seed(0)
    config = TransformerConfig(
        vocab_size=tokenizer.get_vocab_size(),
        hidden_size=36,
        num_layers=2,
        num_heads=3,
        intermediate_size=37,
        max_position_embeddings=128,
        share_embeddings=share_embeddings,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
    )
    return Transformer(config)


@pytest.fixture(scope="session")
def transformer_checkpoint(tmp_path_factory, bpe_tokenizer) -> Path:
    """``tiny_transformer`` with its embeddings shared, as plm-train writes it."""
    return save_untrained(tmp_path_factory.mktemp("transformer"), tiny_transformer(bpe_tokenizer), bpe_tokenizer)


@pytest.fixture(scope="session")
def t5_checkpoint(tmp_path_factory) -> Path:
    """A random tiny T5 v1.1 (hidden 36, 5 heads of 7, d_ff 37, 11 buckets up to distance 9; untied, so that its
    random output layer decodes varied text rather than its input token) with a T5 unigram vocabulary of 500
    tokens (100 sentinels), as span corruption leaves it."""
    tokenizer = unigram_tokenizer(lowercase=False)
    tokenizer.train_from_iterator(tokenizer_texts(), trainer=t5_unigram_trainer(500))
    add_sentinels(tokenizer)
    torch.manual_seed(0)
    # As many decoder layers as encoder ones: transformers 5.23's generation cache is sized by the encoder's.
    config = T5Config(vocab_size=tokenizer.get_vocab_size(), hidden_size=36, head_size=7, num_heads=5,
                      intermediate_size=37, num_layers=2, relative_attention_num_buckets=11,
                      relative_attention_max_distance=9, feed_forward="gated_gelu",
                      tie_word_embeddings=False)  # fmt: skip
    return save_untrained(tmp_path_factory.mktemp("t5"), T5(config), tokenizer, objective="span_corruption")


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(0)
    yield


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
