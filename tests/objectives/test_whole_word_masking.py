"""Chinese whole-word masking (HFL's BERT-wwm): jieba's words travel beside the ids from the store through full
sentences, sentence pairs and SOP's swaps; every character of a chosen word is masked with its own label, about 15%
of the characters overall; pieces that disagree with the words fall back to single tokens; the keys on mlm, mlm_nsp
and mlm_sop."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from plm_toolkit.core.errors import ConfigError
from plm_toolkit.core.resources import resource_path
from plm_toolkit.data.batching.collate import collate
from plm_toolkit.data.layouts.plan import DataPlan
from plm_toolkit.data.layouts.registry import build_pretraining_examples
from plm_toolkit.data.sources.chinese import is_chinese_char
from plm_toolkit.data.sources.documents import split_sentences
from plm_toolkit.data.tokenization.tokenizer import vocab_from_tokenizer
from plm_toolkit.data.units.knowledge import NONE, WORD, SentenceUnits, split_words
from plm_toolkit.data.units.words import WordSources
from plm_toolkit.objectives.masking import IGNORE_INDEX, MaskingTransform, masking_from_config
from plm_toolkit.objectives.mlm import MaskedLanguageModeling, MlmConfig
from plm_toolkit.objectives.mlm_nsp import MlmNsp, MlmNspConfig
from plm_toolkit.objectives.mlm_sop import MlmSop, MlmSopConfig
from plm_toolkit.objectives.sop import SegmentSwap
from tests.data.units.test_units import data_config
from tests.tasks.conftest import tiny_tokenizer

jieba = pytest.importorskip("jieba")


@pytest.fixture(scope="module")
def zh(tmp_path_factory):
    """The first documents of the bundled Chinese corpus, a WordPiece trained on them, and the jieba words seen."""
    root = tmp_path_factory.mktemp("zh")
    documents = Path(resource_path("corpora/zh/train.txt")).read_text(encoding="utf-8").split("\n\n")[:4]
    corpus = root / "train.txt"
    corpus.write_text("\n\n".join(documents) + "\n", encoding="utf-8")
    lines = [line for d in documents for line in d.splitlines()]
    tokenizer = tiny_tokenizer(lines, vocab_size=1200)
    sentences = [sentence for line in lines for sentence in split_sentences(line)]
    words = {sentence[s:e] for sentence in sentences for s, e in split_words(sentence, "jieba")}
    cfg = data_config([corpus], root / "cache", tokenizer, max_seq_len=64)
    return {"cfg": cfg, "tokenizer": tokenizer, "vocab": vocab_from_tokenizer(tokenizer), "words": words}


def examples(zh, layout):
    plan = DataPlan(layout, units=WordSources("jieba"))
    return build_pretraining_examples(zh["cfg"], zh["tokenizer"], zh["vocab"], plan, "train", 7)


def groups(units: torch.Tensor, positions: list[int]) -> list[list[int]]:
    """A row's positions joined into words by their codes (as the masking transform joins them)."""
    out: list[list[int]] = []
    for p in positions:
        if out and int(units[p]) == WORD and out[-1][-1] == p - 1:
            out[-1].append(p)
        else:
            out.append([p])
    return out


def chinese_words(zh, batch, row) -> list[list[int]]:
    """The row's words of two Chinese characters or more, as position lists."""
    real = (batch["attention_mask"][row].bool() & ~batch["special_tokens_mask"][row].bool()).nonzero().flatten()
    tokens = [zh["tokenizer"].id_to_token(int(i)) for i in batch["input_ids"][row]]
    return [w for w in groups(batch["units"][row], real.tolist())
            if len(w) > 1 and all(len(tokens[p]) == 1 and is_chinese_char(tokens[p]) for p in w)]  # fmt: skip


@pytest.mark.parametrize("layout", ["full_sentences", "sentence_pairs", "segment_pairs"])
def test_jieba_words_travel_beside_the_ids(zh, layout):
    """Every multi-character group of codes is one of jieba's words (a pair's truncation may cut one at its edge)."""
    data = examples(zh, layout)
    assert "units" in data.column_names
    batch = collate([data[i] for i in range(min(len(data), 64))], zh["vocab"])
    assert batch["units"].shape == batch["input_ids"].shape
    assert bool((batch["units"][batch["special_tokens_mask"].bool()] == NONE).all())
    found = exact = inside = 0
    for row in range(batch["input_ids"].shape[0]):
        for word in chinese_words(zh, batch, row):
            text = "".join(zh["tokenizer"].id_to_token(int(batch["input_ids"][row, p])) for p in word)
            found += 1
            exact += text in zh["words"]
            inside += any(text in w for w in zh["words"])
    assert found > 100 and inside == found and exact > 0.97 * found, (found, exact, inside)


def test_every_character_of_a_chosen_word_is_masked_with_its_own_label(zh):
    data = examples(zh, "full_sentences")
    batch = collate([data[i] for i in range(len(data))], zh["vocab"])
    config = MlmConfig(masking="whole_word", word_segmenter="jieba")
    out = masking_from_config(OmegaConf.structured(config), zh["vocab"])(batch, range(batch["input_ids"].shape[0]))
    chosen = out["mlm_labels"] != IGNORE_INDEX
    masked_whole = 0
    for row in range(batch["input_ids"].shape[0]):
        for word in chinese_words(zh, batch, row):
            picked = chosen[row, word]
            assert bool(picked.all()) or not bool(picked.any()), "a word is masked whole or not at all"
            masked_whole += bool(picked.all())
    assert masked_whole > 50
    # Labels per character: the original id of each target.
    assert torch.equal(out["mlm_labels"][chosen], batch["input_ids"][chosen])
    maskable = batch["attention_mask"].bool() & ~batch["special_tokens_mask"].bool()
    rate = chosen.sum().item() / maskable.sum().item()
    assert 0.13 < rate < 0.155, rate  # round(0.15 n) a row; words that would overshoot it are skipped
    replaced = out["input_ids"][chosen] == zh["vocab"].mask_id
    assert 0.75 < replaced.float().mean().item() < 0.85


def test_pieces_that_disagree_with_the_words_fall_back_to_single_tokens():
    # Words 中国 | 人民; pieces 中 | 国人 | 民: the piece 国人 reaches over the boundary.
    units = SentenceUnits("中国人民", [(0, 2), (2, 4)])
    assert units.token_codes([(0, 1), (1, 3), (3, 4)]) == [NONE, NONE, NONE]
    assert units.token_codes([(0, 1), (1, 2), (2, 3), (3, 4)]) == [NONE, WORD, NONE, WORD]
    # Inside a phrase, the split word's tokens still join at the phrase level.
    units = SentenceUnits("中国人民", [(0, 2), (2, 4)], phrases=[(0, 2)])
    assert units.token_codes([(0, 1), (1, 3), (3, 4)]) == [NONE, 1, 1]


def test_sop_swap_moves_the_codes_with_their_tokens(zh):
    data = examples(zh, "segment_pairs")
    batch = collate([data[i] for i in range(16)], zh["vocab"])
    swapped = SegmentSwap(swap_prob=1.0)(batch, range(16))
    for row in range(16):
        length = int(batch["attention_mask"][row].sum())
        before = torch.stack([batch["input_ids"][row, :length], batch["units"][row, :length].long()], 1).tolist()
        after = torch.stack([swapped["input_ids"][row, :length], swapped["units"][row, :length].long()], 1).tolist()
        a_end = int((batch["token_type_ids"][row, :length] == 0).sum()) - 1
        assert after == [before[0], *before[a_end + 1 : length - 1], before[a_end], *before[1:a_end], before[-1]]


@pytest.mark.parametrize(
    ("objective", "config", "layout"),
    [(MaskedLanguageModeling, MlmConfig, "full_sentences"), (MlmNsp, MlmNspConfig, "sentence_pairs"),
     (MlmSop, MlmSopConfig, "segment_pairs")],
)  # fmt: skip
def test_the_keys_on_mlm_mlm_nsp_and_mlm_sop(zh, objective, config, layout):
    data_cfg = OmegaConf.merge(zh["cfg"], {"packing": "auto"})
    wwm = OmegaConf.structured(config(masking="whole_word", word_segmenter="jieba"))
    objective.check_config(wwm)
    plan = objective.data_plan(wwm, data_cfg, None)
    assert plan.layout == layout and plan.units == WordSources("jieba")
    assert objective.data_plan(OmegaConf.structured(config(masking="whole_word")), data_cfg, None).units is None
    with pytest.raises(ConfigError, match="objective.masking=token; set objective.masking=whole_word"):
        objective.check_config(OmegaConf.structured(config(masking="token", word_segmenter="jieba")))


def test_without_units_each_chinese_character_is_a_word_of_its_own(zh):
    """No segmenter: the pieces decide, and every character is its own word (what HFL's wwm improves on)."""
    data = build_pretraining_examples(zh["cfg"], zh["tokenizer"], zh["vocab"], "full_sentences", "train", 7)
    batch = collate([data[i] for i in range(32)], zh["vocab"])
    wwm = MaskingTransform(zh["vocab"].size, zh["vocab"].mask_id, zh["vocab"].special_ids, masking="whole_word",
                           continuation_ids=zh["vocab"].continuation_ids)  # fmt: skip
    out = wwm(batch, range(32))
    chosen = out["mlm_labels"] != IGNORE_INDEX
    tokens = [[zh["tokenizer"].id_to_token(int(i)) for i in row] for row in batch["input_ids"]]
    # A chosen Chinese character is never joined to its neighbour by a ## piece: characters are never pieces.
    assert not any(t.startswith("##") and is_chinese_char(t[2:3]) for row in tokens for t in row if len(t) == 3)
    assert chosen.sum() > 0


@pytest.mark.slow
def test_plm_train_mlm_sop_with_chinese_whole_words_learns(tmp_path):
    """plm-train objective=mlm_sop objective.masking=whole_word objective.word_segmenter=jieba on the Chinese corpus:
    the loss falls."""
    import json
    import subprocess
    import sys

    args = ["model=bert_tiny", "model.hidden_size=36", "model.num_layers=2", "model.num_heads=3",
            "model.intermediate_size=37", "model.max_position_embeddings=64", "data.max_seq_len=64",
            "data.tokenizer.vocab_size=1500", "trainer.batch_size=16", "trainer.max_steps=40", "optimizer.lr=3e-3",
            "trainer.log_every=1", "trainer.eval_every=0", "trainer.save_every=0", "trainer.progress_bar=false",
            "trainer.tensorboard=false", "hardware=cpu", "data=text_files",
            f"data.train_files=[{resource_path('corpora/zh/train.txt')}]", f"data.cache_dir={tmp_path}/cache",
            "objective=mlm_sop", "objective.masking=whole_word", "objective.word_segmenter=jieba",
            f"hydra.run.dir={tmp_path}/run"]  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "plm_toolkit.commands.train", *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    losses = [r["mlm_loss"] if "mlm_loss" in r else r["loss"] for r in rows if "loss" in r]
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.5, losses


@pytest.mark.slow
def test_plm_prepare_then_a_resumed_mlm_nsp_run_masks_as_an_uninterrupted_one(tmp_path):
    """plm-prepare writes the store of jieba words once; plm-train reads it (data.store), and a run stopped at step 3
    and resumed to 6 logs the losses of a run of 6 steps."""
    import json
    import subprocess
    import sys

    common = ["model=bert_tiny", "model.hidden_size=36", "model.num_layers=2", "model.num_heads=3",
              "model.intermediate_size=37", "model.max_position_embeddings=64", "data.max_seq_len=64",
              "data.tokenizer.vocab_size=1500", "trainer.batch_size=8", "trainer.log_every=1",
              "trainer.eval_every=0", "trainer.save_every=3", "trainer.progress_bar=false",
              "trainer.tensorboard=false", "hardware=cpu", "data=text_files", "optimizer.total_steps=6",
              f"data.train_files=[{resource_path('corpora/zh/train.txt')}]", f"data.cache_dir={tmp_path}/cache",
              "objective=mlm_nsp", "objective.masking=whole_word", "objective.word_segmenter=jieba"]  # fmt: skip

    def command(module: str, *args: str) -> None:
        done = subprocess.run([sys.executable, "-m", module, *common, *args], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-3000:]

    command("plm_toolkit.commands.prepare", f"data.store={tmp_path}/store", "trainer.max_steps=6")
    store = [f"data.store={tmp_path}/store"]
    command("plm_toolkit.commands.train", *store, "trainer.max_steps=6", f"hydra.run.dir={tmp_path}/straight")
    command("plm_toolkit.commands.train", *store, "trainer.max_steps=3", f"hydra.run.dir={tmp_path}/resumed")
    command("plm_toolkit.commands.train", *store, "trainer.max_steps=6", f"hydra.run.dir={tmp_path}/resumed")

    def losses(run: str) -> list[tuple]:
        rows = [json.loads(line) for line in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]
        return [(r["step"], r["loss"], r["mlm_accuracy"]) for r in rows if "loss" in r]

    assert [step for step, _, _ in losses("resumed")] == list(range(1, 7))
    assert losses("straight") == losses("resumed")
