"""Paper recipes (configs/experiment/*_paper.yaml): each composes and validates, says which paper and section it
follows and what differs, refuses a model of another family, sets schedules equal to the papers' formulas, and a
scaled-down copy of each (the same recipe on a tiny model of its family, few steps) trains with falling loss."""

import functools
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from plm_toolkit.config.train_checks import problems
from plm_toolkit.training.optim import schedule_factor
from tests.conftest import SHARED_DATA
from tests.training.conftest import QUIET, read_metrics

RECIPES = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "configs" / "experiment").glob("*_paper.yaml"))
EN_DE = SHARED_DATA / "translation" / "en-de"

# Tiny odd sizes shared by every family (hidden 36, 3 heads, 2 layers, feed-forward 37).
SMALL = ["model.hidden_size=36", "model.num_layers=2", "model.num_heads=3", "model.intermediate_size=37"]
# BERT's two phases (90% at 128, then 512) at 32 and 64 tokens.
BERT_PHASES = "trainer.phases=[{fraction:0.9,max_seq_len:32},{fraction:0.1,max_seq_len:64}]"
# Each recipe's tiny model and what must shrink with it: the schedule's length, vocabularies and windows.
SCALED = {
    "albert_base_paper": ["model=albert_tiny", *SMALL, "model.embedding_size=20", "optimizer.lr=2e-2"],
    "bert_base_paper": ["model=bert_tiny", *SMALL, "optimizer.lr=3e-3", BERT_PHASES],
    "bert_large_paper": ["model=bert_tiny", *SMALL, "optimizer.lr=3e-3", BERT_PHASES],
    "electra_base_paper": ["model=electra_tiny", *SMALL, "optimizer.lr=3e-3"],
    "electra_small_paper": ["model=electra_tiny", *SMALL, "optimizer.lr=3e-3"],
    "elmo_paper": [
        "model=elmo_tiny", "model.char_embedding_size=5", "model.filters=[[1,7],[2,9]]", "model.hidden_size=13",
        "model.cell_size=29", "trainer.max_steps=30", "trainer.epochs=null",
    ],
    "ernie_1_0_paper": ["model=ernie_tiny", *SMALL, "objective.word_segmenter=regex", "objective.basic_unit=word",
        "optimizer.lr=3e-3",
    ],
    "gpt2_small_paper": ["model=gpt2_tiny", *SMALL, "optimizer.lr=3e-3"],
    "gpt_paper": ["model=gpt_tiny", *SMALL, "trainer.max_steps=30", "trainer.epochs=null", "optimizer.lr=3e-3"],
    "roberta_base_paper": ["model=roberta_tiny", *SMALL, "optimizer.lr=3e-3"],
    "t5_base_paper": ["model=t5_tiny", *SMALL, "model.head_size=12"],
    "t5_v1_1_base_paper": ["model=t5_tiny", *SMALL, "model.head_size=12", "model.feed_forward=gated_gelu"],
    "transformer_base_paper": ["model=transformer_tiny", *SMALL, "data.max_tokens=600"],
    "transformer_big_paper": ["model=transformer_tiny", *SMALL, "data.max_tokens=600"],
    "transformer_xl_wt103_paper": [
        "model=transformer_xl_tiny", *SMALL, "model.head_size=12", "objective.adaptive_softmax_cutoffs=[60,200]",
        "optimizer.lr=3e-3",
    ],
    "xlnet_base_paper": [
        "model=xlnet_tiny", *SMALL, "model.head_size=12", "objective.reuse_len=16", "objective.perm_size=16",
        "optimizer.lr=3e-3",
    ],
}  # fmt: skip
# The same for every recipe: a few steps on a CPU, warm-up shrunk with them.
EVERY = [
    "trainer.max_steps=30", "trainer.batch_size=8", "trainer.grad_accum_steps=1", "trainer.save_every=0",
    "trainer.keep_last=1",
    "data.max_seq_len=32", "data.tokenizer.vocab_size=600", "optimizer.warmup_steps=3", "optimizer.total_steps=null",
    *QUIET,
]  # fmt: skip
# Tiny presets with a learned position table, shrunk too.
POSITIONS = {f"model={name}_tiny" for name in ("albert", "bert", "electra", "ernie", "gpt", "gpt2", "transformer")}


def composed(*overrides: str):
    with initialize_config_module(config_module="plm_toolkit.configs", version_base="1.3"):
        return compose("train", overrides=list(overrides))


def user_data(recipe: str, prefix: Path = EN_DE / "train") -> list[str]:
    """Parallel text (``prefix``.en and .de) for the Transformer's recipes (they name no corpus of their own), else
    nothing."""
    if not recipe.startswith("transformer_") or "_xl_" in recipe:
        return []
    return [f"data.train_files=[{prefix}]"]


def test_every_recipe_composes_validates_and_names_its_paper(tmp_path):
    pair = tmp_path / "train"  # validation checks that both languages' files exist; the shared corpus may not
    for language, text in (("en", "A house.\n"), ("de", "Ein Haus.\n")):
        pair.with_suffix(f".{language}").write_text(text, encoding="utf-8")
    for recipe in RECIPES:
        cfg = composed(f"experiment={recipe}", *user_data(recipe, pair))
        OmegaConf.to_container(cfg, resolve=True)  # every interpolation resolves
        assert problems(cfg) == [], recipe
        assert cfg.recipe.name == recipe and cfg.model.name in cfg.recipe.families, recipe
        header = (Path(__file__).resolve().parents[2] / "configs" / "experiment" / f"{recipe}.yaml").read_text()
        comment = " ".join(line for line in header.splitlines() if line.startswith("#"))
        # The paper (a year) and where in it or in its code the values come from.
        assert re.search(r"\b(19|20)\d\d\b", comment), recipe
        assert re.search(r"section|table|appendix|\w\.(py|sh|yaml)\b", comment), recipe
        assert "Differs here" in comment, recipe


def test_recipe_through_the_command_line_prints_its_settings(tmp_path):
    command = [sys.executable, "-m", "plm_toolkit.commands.train", "experiment=albert_base_paper", "--cfg", "job"]
    out = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True, cwd=tmp_path).stdout
    job = OmegaConf.create(out)
    assert job.model.name == "albert" and job.objective.name == "mlm_sop" and job.objective.masking == "ngram"
    assert (job.optimizer.name, job.optimizer.lr, job.optimizer.bias_correction) == ("lamb", 0.00176, False)
    assert (job.trainer.max_steps, job.trainer.batch_size * job.trainer.grad_accum_steps) == (125000, 4096)


@functools.cache
def recipe_schedule(recipe: str, *overrides: str):
    """The recipe's learning rate and its schedule (composed once per recipe)."""
    cfg = composed(f"experiment={recipe}", *user_data(recipe), *overrides)
    return cfg.optimizer.lr, schedule_factor(cfg.optimizer, cfg.trainer.max_steps)


def lr_at(recipe: str, step: int, *overrides: str) -> float:
    lr, factor = recipe_schedule(recipe, *overrides)
    return lr * factor(step - 1)


@pytest.mark.parametrize("step", [1, 1000, 2000, 2001, 300000, 599999, 600000])
def test_gpt2_small_schedule_is_nanogpts(step):
    """nanoGPT's get_lr: warm-up to 6e-4 over 2000 steps, cosine to 6e-5 at 600,000 (its warm-up is
    (it + 1) / (warmup + 1) of the peak, ours t / warmup: equal at the end of the warm-up)."""
    if step <= 2000:
        expected = 6e-4 * step / 2000
    else:
        expected = 6e-5 + 0.5 * (1 + math.cos(math.pi * (step - 2000) / (600000 - 2000))) * (6e-4 - 6e-5)
    assert lr_at("gpt2_small_paper", step) == pytest.approx(expected, rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("step", [1, 2000, 2001, 50000, 100000])
def test_gpt_schedule_warms_up_over_2000_then_anneals_to_zero(step):
    """GPT, section 4.1: linear from 0 over 2,000 updates to 2.5e-4, then cosine to 0 (a 100,000-step run here)."""
    expected = 2.5e-4 * (step / 2000 if step <= 2000 else 0.5 * (1 + math.cos(math.pi * (step - 2000) / 98000)))
    overrides = ("trainer.epochs=null", "trainer.max_steps=100000")
    assert lr_at("gpt_paper", step, *overrides) == pytest.approx(expected, rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("step", [1, 4000, 4001, 100000])
def test_transformer_schedule_is_noam(step):
    expected = 512**-0.5 * min(step**-0.5, step * 4000**-1.5)
    assert lr_at("transformer_base_paper", step) == pytest.approx(expected, rel=1e-12)
    assert lr_at("transformer_big_paper", step) == pytest.approx(expected * (512 / 1024) ** 0.5, rel=1e-12)


@pytest.mark.parametrize("step", [1, 10000, 10001, 2**19])
def test_t5_schedule_is_the_inverse_square_root(step):
    assert lr_at("t5_base_paper", step) == pytest.approx(1 / math.sqrt(max(step, 10**4)), rel=1e-12)


@pytest.mark.parametrize("step", [1, 3125, 3126, 125000])
def test_albert_schedule_warms_up_then_decays_linearly_to_zero(step):
    expected = 0.00176 * (step / 3125 if step <= 3125 else (125000 - step) / (125000 - 3125))
    assert lr_at("albert_base_paper", step) == pytest.approx(expected, rel=1e-9, abs=1e-15)


def test_bert_schedule_spans_both_phases():
    """One schedule over the run: the 128-token phase ends at step 900,000 with a tenth of the decay left."""
    assert lr_at("bert_base_paper", 900000) == pytest.approx(1e-4 * 100000 / 990000, rel=1e-9)


def test_recipe_refuses_a_model_of_another_family():
    from plm_toolkit.config.validate import validate
    from plm_toolkit.core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"experiment=t5_base_paper is a recipe for t5 models .* bert model"):
        validate(composed("experiment=t5_base_paper", "model=bert_base"))
    assert problems(composed("experiment=t5_base_paper", "model=t5_small")) == []


@pytest.mark.slow
@pytest.mark.parametrize("recipe", RECIPES)
def test_scaled_down_recipe_trains_with_falling_loss(recipe, small_corpus, tmp_path):
    import plm_toolkit.commands.train as train

    data = user_data(recipe)
    if data and not EN_DE.is_dir():
        pytest.skip(f"no parallel text at {EN_DE}")
    data = data or ["data=text_files", f"data.train_files=[{small_corpus['train']}]"]
    positions = ["model.max_position_embeddings=64"] if SCALED[recipe][0] in POSITIONS else []
    scaled = [*EVERY, *SCALED[recipe], *positions, f"data.cache_dir={small_corpus['cache']}"]
    cfg = composed(f"experiment={recipe}", *data, *scaled)
    assert cfg.recipe.name == recipe
    train.run(cfg, tmp_path)
    losses = [m["loss"] for m in read_metrics(tmp_path) if "loss" in m]
    assert len(losses) == 30
    # BERT's phases end with 3 steps at twice the length, whose loss starts higher: compare the end of phase 1.
    end = 27 if BERT_PHASES in SCALED[recipe] else 30
    first, last = sum(losses[:5]) / 5, sum(losses[end - 5 : end]) / 5
    assert last < 0.95 * first, (recipe, losses)
