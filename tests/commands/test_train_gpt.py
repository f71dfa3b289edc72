"""model=gpt2 end to end on a small corpus: shuffled windows, a loss that falls over 60 steps, exact resume, and
fine-tuning of the checkpoint on SST-2 and NER."""

import json

import pytest
from hydra import compose, initialize_config_module

from plm_toolkit.commands.finetune import run as finetune
from plm_toolkit.commands.train import run
from plm_toolkit.config.resolve import resolve_run, resolved_tokenizer_kind
from plm_toolkit.core.errors import CheckpointError
from tests.tasks.conftest import QUIET, SST2_DEV, SST2_TRAIN
from tests.training.conftest import GPT2_SMALL, read_metrics, train_records


@pytest.fixture
def gpt_config(make_config):
    def make(*overrides):
        return make_config(*GPT2_SMALL, *QUIET, "trainer.eval_every=0", *overrides, tiny=False)

    return make


def test_windows_are_shuffled_for_gpt_and_read_in_order_for_transformer_xl(gpt_config, make_config):
    cfg = gpt_config()
    plan = resolve_run(cfg).plan
    assert (plan.layout, plan.order, plan.window, plan.stride) == ("streams", "shuffled", 33, 32)
    assert resolved_tokenizer_kind(cfg) == "gpt2_bpe"
    assert resolve_run(make_config("model=transformer_xl", "data.max_seq_len=32", tiny=False)).plan.order == "stream"


@pytest.mark.slow
def test_sixty_steps_loss_falls(gpt_run):
    records = read_metrics(gpt_run)
    train = [r["loss"] for r in records if "lr" in r]
    assert len(train) == 60
    first, last = sum(train[:5]) / 5, sum(train[-5:]) / 5
    assert last < first - 0.5, (first, last)  # from ln(600) = 6.4, the uniform loss; 0.7-0.8 seen
    evaluation = [r for r in records if "eval_loss" in r][-1]
    assert evaluation["eval_clm_perplexity"] < 300  # half the uniform distribution's 600; about 240 seen


@pytest.mark.slow
def test_resume_continues_bit_exactly(gpt_config, tmp_path):
    common = ["trainer.save_every=5", "optimizer.total_steps=10", "trainer.seed=3"]
    run(gpt_config(*common, "trainer.max_steps=10"), tmp_path / "straight")
    run(gpt_config(*common, "trainer.max_steps=5"), tmp_path / "resumed")
    run(gpt_config(*common, "trainer.max_steps=10", "trainer.resume=auto"), tmp_path / "resumed")
    a, b = train_records(tmp_path / "straight"), train_records(tmp_path / "resumed")
    assert [r["step"] for r in b] == list(range(1, 11))
    assert [r["loss"] for r in a] == [r["loss"] for r in b]


def finetune_config(*overrides):
    fast = ["model.dropout=0", "optimizer.lr=3e-3", "optimizer.warmup_ratio=0", "trainer.batch_size=16", *QUIET]
    with initialize_config_module(config_module="plm_toolkit.configs", version_base="1.3"):
        return compose("finetune", overrides=[*fast, *overrides])


@pytest.mark.slow
def test_gpt_fine_tunes_on_sst2_and_ner(gpt_run, tmp_path):
    """The head reads the last real token (the template's <|endoftext|>), which has seen the whole sentence."""
    checkpoint = f"model.checkpoint={gpt_run / 'checkpoints' / 'last'}"
    sst2 = [f"data.train_file={SST2_TRAIN}", f"data.validation_file={SST2_DEV}", "data.max_seq_len=40"]
    cfg = finetune_config(
        checkpoint, *sst2, "data.max_train_samples=64", "data.max_eval_samples=50", "trainer.max_steps=150"
    )
    finetune(cfg, tmp_path / "sst2")
    losses = [r["loss"] for r in read_metrics(tmp_path / "sst2") if "lr" in r]
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.2, losses
    assert "accuracy" in json.loads((tmp_path / "sst2" / "eval_results.json").read_text())

    conll = tmp_path / "train.conll"
    sentences = ["John lives in Paris", "Mary visited Berlin today", "The cat sat", "Anna flew to Rome"]
    tags = [["B-PER", "O", "O", "B-LOC"], ["B-PER", "O", "B-LOC", "O"], ["O", "O", "O"], ["B-PER", "O", "O", "B-LOC"]]
    blocks = [
        "\n".join(f"{w} {t}" for w, t in zip(s.split(), ts, strict=True)) for s, ts in zip(sentences, tags, strict=True)
    ]
    conll.write_text("\n\n".join(blocks * 8) + "\n")
    ner = [f"data.train_file={conll}", f"data.validation_file={conll}", "trainer.max_steps=20"]
    finetune(finetune_config("task=ner", checkpoint, *ner), tmp_path / "ner")
    losses = [r["loss"] for r in read_metrics(tmp_path / "ner") if "lr" in r]
    assert losses[-1] < losses[0] / 2, losses
    assert json.loads((tmp_path / "ner" / "eval_results.json").read_text())["f1"] > 0.5


def test_transformer_xl_has_no_hugging_face_export(tmp_path):
    from plm_toolkit.interop.hf import export_hf
    from plm_toolkit.models.transformer_xl import TransformerXL, TransformerXLConfig

    model = TransformerXL(TransformerXLConfig(vocab_size=50, hidden_size=16, num_layers=1, num_heads=2, head_size=8))
    with pytest.raises(CheckpointError, match="model=transformer_xl has no Hugging Face adapter .* gpt2"):
        export_hf(tmp_path / "x", model)
