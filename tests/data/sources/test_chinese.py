"""Chinese text: every CJK ideograph of BERT's ranges a token of its own (block by block, against BERT's
_is_chinese_char and the tokenizers library's normalizer), sentences that end at 。！？, the bundled Chinese corpus,
and ERNIE's knowledge masking on it (jieba words, collocation phrases, gazetteer entities, masked whole)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, normalizers, pre_tokenizers

from plm_toolkit.core.resources import resource_path
from plm_toolkit.data.batching.collate import collate
from plm_toolkit.data.layouts.plan import DataPlan
from plm_toolkit.data.layouts.registry import build_pretraining_examples
from plm_toolkit.data.sources.chinese import BERT_CJK_RANGES, chinese_sentence_ends, is_chinese_char
from plm_toolkit.data.sources.documents import split_sentences
from plm_toolkit.data.tokenization.tokenizer import load_tokenizer, vocab_from_tokenizer
from plm_toolkit.data.units.knowledge import ENTITY, NONE, PHRASE, WORD, split_words
from plm_toolkit.objectives.knowledge_masking import KnowledgeMaskingConfig, StagedMasking
from plm_toolkit.objectives.masking import IGNORE_INDEX, masking_from_config, word_spans
from tests.data.units.test_units import data_config
from tests.tasks.conftest import tiny_tokenizer

CORPUS = Path(resource_path("corpora/zh"))
# The blocks Unicode added after BERT (2018), which BERT's tokenizer leaves to its other rules.
NEWER_BLOCKS = ((0x2CEB0, 0x2EBEF, "Extension F"), (0x30000, 0x3134F, "Extension G"), (0x31350, 0x323AF, "Extension H"))
# BERT's _is_chinese_char as written in google-research/bert tokenization.py, the reference.
BERT_REFERENCE = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
                  (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))  # fmt: skip


def samples(first: int, last: int) -> list[str]:
    """The first, second, a middle and the last character of a block."""
    return [chr(c) for c in dict.fromkeys((first, first + 1, (first + last) // 2, last))]


@pytest.fixture(scope="module")
def cjk_tokenizer(tmp_path_factory):
    """A cased WordPiece vocabulary (no accent stripping, so compatibility ideographs stay as written) that knows
    four characters of every block, loaded as plm_toolkit loads any vocab.txt."""
    characters = [c for first, last, _ in BERT_CJK_RANGES for c in samples(first, last)]
    path = tmp_path_factory.mktemp("cjk") / "vocab.txt"
    path.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "##b", *dict.fromkeys(characters)]))
    return load_tokenizer(path, lowercase=False)


def test_the_ranges_are_berts():
    assert [(first, last) for first, last, _ in BERT_CJK_RANGES] == list(BERT_REFERENCE)
    for first, last in BERT_REFERENCE:
        assert is_chinese_char(chr(first)) and is_chinese_char(chr(last))
        assert not is_chinese_char(chr(first - 1)) or any(a <= first - 1 <= b for a, b in BERT_REFERENCE)


@pytest.mark.parametrize(("first", "last", "block"), BERT_CJK_RANGES, ids=[b for _, _, b in BERT_CJK_RANGES])
def test_every_block_splits_into_one_token_per_ideograph(cjk_tokenizer, first, last, block):
    characters = samples(first, last)
    text = "".join(characters) + "ab" + "".join(characters)
    tokens = cjk_tokenizer.encode(text, add_special_tokens=False).tokens
    assert tokens == [*characters, "a", "##b", *characters], block
    # The words of ERNIE's units (data/units/knowledge.py) split the same way.
    assert [text[s:e] for s, e in split_words(text)] == [*characters, "ab", *characters]


@pytest.mark.parametrize(("first", "last", "block"), NEWER_BLOCKS, ids=[b for _, _, b in NEWER_BLOCKS])
def test_blocks_newer_than_bert_stay_as_bert_leaves_them(cjk_tokenizer, first, last, block):
    characters = samples(first, last)
    assert not any(is_chinese_char(c) for c in characters)
    assert cjk_tokenizer.encode("".join(characters), add_special_tokens=False).tokens == ["[UNK]"], block


def test_the_pipeline_closes_the_gap_in_the_tokenizers_normalizer(cjk_tokenizer):
    """tokenizers' BertNormalizer starts extension E at U+2B920: U+2B820..U+2B91F stay joined there."""
    normalizer = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=True, strip_accents=False,
                                            lowercase=False)  # fmt: skip
    gap = [c for c in map(chr, range(0x2B820, 0x2CEB0)) if normalizer.normalize_str(c) != f" {c} "]
    if not gap:
        pytest.skip("this tokenizers release splits all of extension E")
    assert (ord(gap[0]), ord(gap[-1]), len(gap)) == (0x2B820, 0x2B91F, 256)
    pair = chr(0x2B820) + chr(0x2B830)  # a known and an unknown character of the gap
    assert cjk_tokenizer.encode(pair, add_special_tokens=False).tokens == [chr(0x2B820), "[UNK]"]
    plain = Tokenizer.from_str(cjk_tokenizer.to_str())
    plain.pre_tokenizer = pre_tokenizers.BertPreTokenizer()  # the normalizer alone: one word, one [UNK]
    assert plain.encode(pair, add_special_tokens=False).tokens == ["[UNK]"]


def test_a_trained_wordpiece_never_joins_two_ideographs(tmp_path):
    lines = (CORPUS / "train.txt").read_text(encoding="utf-8").splitlines()
    tokenizer = tiny_tokenizer([line for line in lines if line], vocab_size=3000)
    joined = [t for t in tokenizer.get_vocab() if sum(is_chinese_char(c) for c in t) > 1]
    assert joined == []
    characters = {c for line in lines for c in line if is_chinese_char(c)}
    assert characters <= set(tokenizer.get_vocab())  # every character of the corpus is a token of its own
    tokens = tokenizer.encode(lines[0], add_special_tokens=False).tokens
    assert [t for t in tokens if any(map(is_chinese_char, t))] == [c for c in lines[0] if is_chinese_char(c)]


# --- sentences --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "sentences"),
    [
        ("我们去北京。你呢？他说：“好的！”然后走了。", ["我们去北京。", "你呢？", "他说：“好的！”", "然后走了。"]),
        ("真的吗？！当然。。。", ["真的吗？！", "当然。。。"]),
        ("第一句｡第二句‼第三句", ["第一句｡", "第二句‼", "第三句"]),
        ("你好!我很好? 好的", ["你好!", "我很好?", "好的"]),  # halfwidth marks before an ideograph
        ("他说：「走吧。」我们就走了。", ["他说：「走吧。」", "我们就走了。"]),
        ("版本 2.0。The end. Mr. Smith left.", ["版本 2.0。", "The end.", "Mr. Smith left."]),
        ("列表：一、二、三；四，五", ["列表：一、二、三；四，五"]),  # commas and semicolons end nothing
        ("He said hi! OK?", ["He said hi!", "OK?"]),
    ],
)
def test_chinese_sentences_end_at_their_marks(text, sentences):
    assert split_sentences(text) == sentences


def test_no_boundary_at_the_end_of_a_line():
    assert chinese_sentence_ends("完了。") == []


def test_the_corpus_paragraphs_split_into_sentences():
    lines = [line for line in (CORPUS / "train.txt").read_text(encoding="utf-8").splitlines() if line]
    counts = [len(split_sentences(line)) for line in lines]
    assert sum(counts) > 1.5 * len(lines)  # a paragraph used to be one sentence
    assert all("".join(split_sentences(line)).replace(" ", "") == line.replace(" ", "") for line in lines)


# --- the corpus -------------------------------------------------------------------------------------------


def test_the_bundled_corpus_is_small_chinese_and_documented():
    source = (CORPUS / "SOURCE.md").read_text(encoding="utf-8")
    for name in ("train.txt", "valid.txt"):
        data = (CORPUS / name).read_bytes()
        assert len(data) < 200_000
        assert hashlib.sha256(data).hexdigest() in source, f"{name}'s checksum is in SOURCE.md"
        text = data.decode("utf-8")
        visible = [c for c in text if not c.isspace()]
        assert sum(map(is_chinese_char, visible)) > 0.6 * len(visible)
    assert "GPL-3.0-or-later" in source and "scripts/make_zh_corpus.py" in source
    assert re.search(r"\n\n", (CORPUS / "train.txt").read_text(encoding="utf-8"))  # several documents


# --- ERNIE's knowledge masking on Chinese -----------------------------------------------------------------


@pytest.fixture(scope="module")
def ernie_zh(tmp_path_factory):
    """The Chinese corpus's full-sentence examples with ERNIE's units: jieba words, collocation phrases, and the
    entities of a gazetteer (names of standard streams and packages, as a technical text's entities)."""
    pytest.importorskip("jieba")
    root = tmp_path_factory.mktemp("ernie_zh")
    gazetteer = root / "gazetteer.txt"
    gazetteer.write_text("标准输入\n标准输出\n符号链接\n环境变量\n正则表达式\n", encoding="utf-8")
    lines = [line for line in (CORPUS / "train.txt").read_text(encoding="utf-8").splitlines() if line]
    tokenizer = tiny_tokenizer(lines, vocab_size=1500)
    vocab = vocab_from_tokenizer(tokenizer)
    config = KnowledgeMaskingConfig(word_segmenter="jieba", entity_gazetteer=str(gazetteer), total_steps=30,
                                    collocation_threshold=20.0)  # fmt: skip
    cfg = data_config([CORPUS / "train.txt"], root / "cache", tokenizer, max_seq_len=96)
    data = build_pretraining_examples(cfg, tokenizer, vocab, DataPlan("full_sentences", units=config), "train", 3)
    batch = collate([data[i] for i in range(len(data))], vocab)
    return {"batch": batch, "vocab": vocab, "config": config, "tokenizer": tokenizer}


def units_at(batch, row: int, level: int) -> list[list[int]]:
    maskable = (batch["attention_mask"][row].bool() & ~batch["special_tokens_mask"][row].bool()).nonzero()
    positions = maskable.flatten().tolist()
    return word_spans(positions, [int(batch["units"][row, p]) <= level for p in positions])


def test_chinese_text_has_words_phrases_and_entities(ernie_zh):
    batch, tokenizer = ernie_zh["batch"], ernie_zh["tokenizer"]
    codes = batch["units"][batch["attention_mask"].bool() & ~batch["special_tokens_mask"].bool()]
    counts = {level: int((codes == level).sum()) for level in (WORD, PHRASE, ENTITY, NONE)}
    assert counts[WORD] > 5000 and counts[PHRASE] > 50 and counts[ENTITY] > 50, counts
    entities = set()
    for row in range(batch["input_ids"].shape[0]):
        for unit in units_at(batch, row, ENTITY):
            if any(int(batch["units"][row, p]) == ENTITY for p in unit):
                entities.add("".join(tokenizer.id_to_token(int(batch["input_ids"][row, p])) for p in unit))
    assert {"标准输入", "标准输出", "符号链接"} <= entities


@pytest.mark.parametrize("level", [WORD, PHRASE, ENTITY])
def test_each_stage_masks_its_chinese_units_whole(ernie_zh, level):
    batch, config = ernie_zh["batch"], ernie_zh["config"]
    staged = StagedMasking(masking_from_config(config, ernie_zh["vocab"]), (10, 20), "word", 30)
    rows = batch["input_ids"].shape[0]
    out = staged(batch, range(rows), step={WORD: 0, PHRASE: 10, ENTITY: 20}[level])
    chosen = out["mlm_labels"] != IGNORE_INDEX
    multi = 0
    for row in range(rows):
        for unit in units_at(batch, row, level):
            picked = chosen[row, unit]
            assert bool(picked.all()) or not bool(picked.any())
            multi += len(unit) > 1 and bool(picked.all())
        # One 80/10/10 draw per unit: a unit is masked, replaced or kept as a whole.
        for unit in units_at(batch, row, level):
            if bool(chosen[row, unit].all()):
                masked = out["input_ids"][row, unit] == ernie_zh["vocab"].mask_id
                assert bool(masked.all()) or not bool(masked.any())
    assert multi > 100
    maskable = batch["attention_mask"].bool() & ~batch["special_tokens_mask"].bool()
    assert 0.12 < chosen.sum().item() / maskable.sum().item() < 0.155  # round(0.15 n) targets a row
    assert torch.equal(out["mlm_labels"][chosen], batch["input_ids"][chosen])


def test_a_store_of_sentences_split_by_the_older_rules_is_refused(tmp_path):
    """A store names its sentence rules: one prepared before Chinese sentence ends (no such setting) is refused."""
    import json

    from plm_toolkit.core.errors import DataError
    from plm_toolkit.data.store.preparation import prepare_store

    lines = (CORPUS / "valid.txt").read_text(encoding="utf-8").splitlines()
    tokenizer = tiny_tokenizer([line for line in lines if line], vocab_size=600)
    cfg = data_config([CORPUS / "valid.txt"], tmp_path / "cache", tokenizer, store=str(tmp_path / "store"))
    folder = prepare_store(cfg, "sentences")
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["settings"]["sentence_rules"] == 2
    del manifest["settings"]["sentence_rules"]
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(DataError, match="holds sentences split by English rules only; this run needs sentences split"):
        prepare_store(cfg, "sentences")
