"""End-to-end T5 span-corruption runs: the loss falls over 60 steps, resume is exact, bad combinations are refused."""

import math

import pytest
import torch
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from plm_toolkit.errors import ConfigError, DataError
from plm_toolkit.export import export_checkpoint
from plm_toolkit.generate import run as generate
from plm_toolkit.models.pretrained import load_language_model
from plm_toolkit.train import run

from .conftest import read_metrics

# A tiny T5 with odd sizes; 300 tokens of vocabulary (100 of them sentinels).
T5 = [
    "model=t5",
    "model.hidden_size=36",
    "model.num_heads=3",
    "model.head_size=11",
    "model.intermediate_size=37",
    "model.num_decoder_layers=3",
    "data.max_seq_len=40",
    "data.tokenizer.vocab_size=300",
    "trainer.batch_size=8",
    "trainer.log_every=1",
    "trainer.eval_every=0",
    "trainer.progress_bar=false",
    "trainer.tensorboard=false",
    "hardware=cpu",
    "optimizer.lr=3e-3",
]


@pytest.mark.slow
def test_sixty_steps_of_span_corruption_lower_the_loss_then_generate_and_export(make_config, tmp_path):
    steps = ["trainer.max_steps=60", "trainer.eval_every=20", "trainer.eval_batches=4"]
    final = run(make_config(*T5, *steps, tiny=False), tmp_path)
    records = read_metrics(tmp_path)
    train = [r for r in records if "lr" in r]
    first, last = sum(r["loss"] for r in train[:5]) / 5, sum(r["loss"] for r in train[-10:]) / 10
    assert last < first - 1.0, (first, last)
    saved = OmegaConf.load(tmp_path / "checkpoints" / "last" / "config.yaml")
    assert saved.data.tokenizer.kind == "t5_unigram" and saved.model.vocab_size == 300
    # Evaluation decodes the same corrupted validation windows each time: well below the uniform ln(V) at the end.
    evals = [r["eval_span_corruption_loss"] for r in records if "eval_loss" in r]
    assert len(evals) == 3 and evals[-1] < evals[0] and evals[-1] < math.log(300) - 1.0, evals
    assert final["eval_span_corruption_perplexity"] == pytest.approx(math.exp(evals[-1]), rel=1e-6)
    check_generate_and_export(tmp_path / "checkpoints" / "last", tmp_path)


def check_generate_and_export(checkpoint, tmp_path):
    """plm-generate decodes the trained checkpoint greedily (each token the argmax given the ones before) and with
    beams; plm-export writes a folder transformers' T5ForConditionalGeneration loads with the same logits."""
    lm = load_language_model(checkpoint)
    rows = generate(generate_config(f"checkpoint={checkpoint}", "prompt='The <extra_id_0> of the'", "max_new_tokens=6"))
    source = torch.tensor([rows[0]["prompt_ids"]])
    tokens = rows[0]["token_ids"]
    assert tokens and tokens[0] == lm.model.config.vocab_size - 1  # a trained T5 starts with <extra_id_0>
    decoder_input = torch.tensor([[0, *tokens[:-1]]])
    with torch.no_grad():
        scores = lm.head(lm.model(source, torch.ones_like(source), decoder_input).hidden[0])
    assert scores.argmax(-1).tolist() == tokens
    beams = generate(generate_config(f"checkpoint={checkpoint}", "prompt='The <extra_id_0>'", "num_beams=3"))
    assert beams[0]["token_ids"]
    transformers = pytest.importorskip("transformers")
    export_checkpoint(checkpoint, tmp_path / "hf")
    reference = transformers.T5ForConditionalGeneration.from_pretrained(tmp_path / "hf").eval()
    with torch.no_grad():
        theirs = reference(input_ids=source, decoder_input_ids=decoder_input).logits[0]
    assert (theirs - lm.model.logits(lm.model(source, None, decoder_input).hidden)[0]).abs().max() <= 1e-4


def generate_config(*overrides):
    with initialize_config_module(config_module="plm_toolkit.configs", version_base="1.3"):
        return compose("generate", overrides=list(overrides))


@pytest.mark.slow
def test_resume_continues_exactly(make_config, tmp_path):
    common = [*T5, "trainer.save_every=4", "optimizer.total_steps=8", "trainer.grad_accum_steps=2", "model.dropout=0.1"]
    straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"
    run(make_config(*common, "trainer.max_steps=8", tiny=False), straight)
    run(make_config(*common, "trainer.max_steps=4", tiny=False), interrupted)
    run(make_config(*common, "trainer.max_steps=8", "trainer.resume=auto", tiny=False), interrupted)
    a, b = read_metrics(straight), read_metrics(interrupted)
    assert [r["step"] for r in b] == list(range(1, 9))
    assert [r["loss"] for r in a] == [r["loss"] for r in b]
    from safetensors.torch import load_file

    wa = load_file(straight / "checkpoints" / "last" / "model.safetensors")
    wb = load_file(interrupted / "checkpoints" / "last" / "model.safetensors")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def test_span_corruption_on_an_encoder_only_model_names_the_capability(make_config, tmp_path):
    with pytest.raises(ConfigError, match="objective=span_corruption needs a model that is encoder_decoder; "):
        run(make_config("objective=span_corruption"), tmp_path)


def test_a_vocabulary_without_sentinels_is_refused(make_config, tmp_path):
    # T5 over RoBERTa's byte-level BPE: it has </s> and <pad>, but no <extra_id_N>.
    with pytest.raises(DataError, match=r"has no sentinel tokens \(<extra_id_0>, <extra_id_1>, ...\)"):
        run(make_config(*T5, "data.tokenizer.kind=bpe", "trainer.max_steps=1", tiny=False), tmp_path)
