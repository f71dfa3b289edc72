"""Knowledge units: words, pre-segmented marks, lexicon and gazetteer matching, collocation phrases, join codes
aligned with real tokenizers, the token store of units on WikiText-2, jieba for Chinese, and the bad inputs."""

from __future__ import annotations

import random
import re
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from plm_toolkit.core.data_schema import DataConfig, TokenizerConfig
from plm_toolkit.core.errors import DataError
from plm_toolkit.data.store.preparation import prepare_store
from plm_toolkit.data.store.token_store import TokenStore
from plm_toolkit.data.tokenization.tokenizer import load_tokenizer
from plm_toolkit.data.units.collocations import learn_phrases
from plm_toolkit.data.units.knowledge import (
    ENTITY,
    NONE,
    PHRASE,
    WORD,
    Lexicon,
    SentenceUnits,
    parse_presegmented,
    read_lexicon,
    split_words,
)


def words_of(text: str, segmenter: str = "regex") -> list[str]:
    return [text[s:e] for s, e in split_words(text, segmenter)]


def sources(**overrides) -> SimpleNamespace:
    base = dict(
        word_segmenter="regex",
        presegmented=False,
        phrase_lexicon=None,
        phrase_lexicon_case="ignore",
        entity_gazetteer=None,
        entity_gazetteer_case="exact",
        entity_tagger=None,
        collocation_min_count=5,
        collocation_threshold=100.0,
        collocation_passes=2,
    )
    return SimpleNamespace(**{**base, **overrides})


def data_config(files: list, cache, tokenizer, **fields) -> OmegaConf:
    """A data group reading ``files`` with ``tokenizer`` (a Tokenizer, saved under ``cache``), in one process."""
    cache.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(cache / "tokenizer.json"))
    fields = {"num_proc": 1, **fields}
    return OmegaConf.structured(
        DataConfig(
            train_files=[str(f) for f in files],
            cache_dir=str(cache),
            tokenizer=TokenizerConfig(path=str(cache / "tokenizer.json")),
            **fields,
        )
    )


def units_store(files: list, cache, tokenizer, units, **fields) -> TokenStore:
    """The token store of ``files``' knowledge units found from ``units`` (the objective's keys)."""
    return TokenStore(prepare_store(data_config(files, cache, tokenizer, **fields), "units", units=units))


def coded_sentences(store: TokenStore, split: str = "train") -> list[list[tuple[list[int], list[int]]]]:
    """Each document of ``split`` as (token ids, join codes) per sentence."""
    part = store.split(split)
    documents = zip(part.documents(), part.documents("units"), strict=True)
    return [list(zip(ids, codes, strict=True)) for ids, codes in documents]


@pytest.fixture(scope="module")
def bert_tokenizer(shared_data_module):
    return load_tokenizer(shared_data_module / "models" / "bert-base-uncased" / "vocab.txt")


@pytest.fixture(scope="module")
def shared_data_module():
    from tests.conftest import SHARED_DATA

    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


def test_words_split_like_berts_pre_tokenizer():
    assert words_of("New York's 2nd-largest park, est. 1857!") == [
        "New", "York", "'", "s", "2nd", "-", "largest", "park", ",", "est", ".", "1857", "!",
    ]  # fmt: skip
    assert words_of("我爱北京 in 2020") == ["我", "爱", "北", "京", "in", "2020"]  # each CJK character alone


def test_presegmented_marks_phrases_and_entities():
    plain, words, spans = parse_presegmented("He moved to {{New York}} in [[the late {{Cold War}} era]] .", "f.txt")
    assert plain == "He moved to New York in the late Cold War era ."
    assert [plain[s:e] for s, e in words][3:5] == ["New", "York"]
    assert spans == {"phrase": [(6, 11)], "entity": [(3, 5), (8, 10)]}
    with pytest.raises(DataError, match=r"f.txt: unbalanced or crossing '\]\]'"):
        parse_presegmented("a [[b {{c]] d}}", "f.txt")
    with pytest.raises(DataError, match=r"f.txt: '\{\{' is never closed"):
        parse_presegmented("a {{b c", "f.txt")


def test_lexicon_matches_longest_first_with_case_options():
    words = ["The", "New", "York", "Times", "reported", "from", "new", "york"]
    exact = Lexicon([["New", "York"], ["New", "York", "Times"]])
    assert exact.match(words) == [(1, 4)]
    assert Lexicon([["New", "York"]], ignore_case=True).match(words) == [(1, 3), (6, 8)]


def test_join_codes_nest_words_phrases_and_entities(bert_tokenizer):
    text = "Dr Smithson visited the United States Congress on a cold winter day"
    units = SentenceUnits(text, split_words(text))
    units.add("entity", [(4, 7)])  # United States Congress
    # "United States" lies inside the entity and "visited the United" crosses it: both dropped.
    units.add("phrase", [(4, 6), (2, 5), (9, 12)])
    units.resolve()
    assert units.phrases == [(9, 12)]
    encoding = bert_tokenizer.encode(text, add_special_tokens=False)
    pieces = list(zip(encoding.tokens, units.token_codes(encoding.offsets), strict=True))
    assert pieces[:3] == [("dr", NONE), ("smith", NONE), ("##son", WORD)]
    assert pieces[-9:-4] == [("the", NONE), ("united", NONE), ("states", ENTITY), ("congress", ENTITY), ("on", NONE)]
    assert pieces[-3:] == [("cold", NONE), ("winter", PHRASE), ("day", PHRASE)]
    around = SentenceUnits(text, split_words(text), phrases=[(3, 7)], entities=[(4, 7)])
    around.resolve()
    assert around.phrases == [(3, 7)]  # "the United States Congress" holds the entity and more: kept


def test_join_codes_with_byte_level_pieces(tmp_path):
    """A byte-level BPE piece that starts in the space before a word belongs to that word."""
    from tokenizers import models, trainers

    from plm_toolkit.data.tokenization.pipelines import BPE_SPECIAL_TOKENS, byte_level_tokenizer

    tokenizer = byte_level_tokenizer(models.BPE())
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=list(BPE_SPECIAL_TOKENS), show_progress=False)
    tokenizer.train_from_iterator(["New York is a big city in the United States"] * 20, trainer=trainer)
    text = "Old New Yorkers"
    units = SentenceUnits(text, split_words(text))
    units.add("entity", [(1, 3)])
    encoding = tokenizer.encode(text, add_special_tokens=False)
    codes = units.token_codes(encoding.offsets)
    # "ĠNew" starts at the space before "New", "ĠYork" at the one before "Yorkers": one entity of two words.
    tokens = encoding.tokens
    assert tokens[-5:-3] == ["\u0120New", "\u0120York"]
    assert codes[-5:] == [NONE, ENTITY, WORD, WORD, WORD][-len(codes[-5:]) :]


def test_lexicon_files_bad_inputs(tmp_path):
    latin1 = tmp_path / "gazetteer.txt"
    latin1.write_bytes("Paris\nZ\u00fcrich\n".encode("latin-1"))
    with pytest.raises(DataError, match=rf"{latin1}:2: not valid UTF-8 .*objective.entity_gazetteer must be UTF-8"):
        read_lexicon(latin1, "objective.entity_gazetteer", "regex", False, 1)
    empty = tmp_path / "phrases.txt"
    empty.write_text("\n  \n")
    with pytest.raises(DataError, match=rf"objective.phrase_lexicon={empty}: no entries"):
        read_lexicon(empty, "objective.phrase_lexicon", "regex", True, 2)
    single = tmp_path / "single.txt"
    single.write_text("alone\nwords\n")
    with pytest.raises(DataError, match=r"a phrase needs two words or more"):
        read_lexicon(single, "objective.phrase_lexicon", "regex", True, 2)
    with pytest.raises(DataError, match=r"no such file"):
        read_lexicon(tmp_path / "missing.txt", "objective.entity_gazetteer", "regex", False, 1)
    typed = tmp_path / "typed.txt"
    typed.write_text("New York\tLOC\nAda Lovelace\tPER\n")
    assert read_lexicon(typed, "objective.entity_gazetteer", "regex", False, 1).entries == {
        ("New", "York"),
        ("Ada", "Lovelace"),
    }


def wikitext_sentences(path):
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    lines = [line for line in lines if line and not line.startswith("=")]
    return lambda: ([line[s:e] for s, e in split_words(line)] for line in lines)


@pytest.mark.slow
def test_collocations_find_multi_word_names_on_wikitext2(shared_data):
    phrases = learn_phrases(wikitext_sentences(shared_data / "wikitext2" / "wiki.valid.tokens"))
    assert {("New", "York"), ("United", "States")} <= phrases
    assert any(len(p) >= 3 for p in phrases)  # the second pass joins earlier joins
    assert all(any(c.isalnum() for c in w) for p in phrases for w in p)  # no punctuation in a phrase
    assert not {("of", "the"), ("in", "the")} & phrases  # frequent pairs of frequent words score low


@pytest.mark.slow
def test_gazetteer_and_collocations_on_wikitext2(shared_data, bert_tokenizer, tmp_path):
    corpus = shared_data / "wikitext2" / "wiki.valid.tokens"
    gazetteer = tmp_path / "gazetteer.txt"
    gazetteer.write_text("New York\nUnited States\nWorld War II\n")
    store = units_store([corpus], tmp_path / "cache", bert_tokenizer, sources(entity_gazetteer=str(gazetteer)))
    counts = store.manifest["splits"]["train"]["units"]
    # Every occurrence in the text is found (WikiText's tokens keep the names apart from punctuation).
    text = corpus.read_text(encoding="utf-8")
    expected = sum(len(re.findall(rf"\b{n}\b", text)) for n in ("New York", "United States", "World War II"))
    assert counts["entities"] == expected and counts["distinct_entities"] == 3
    assert counts["phrases"] > 1000 and counts["distinct_phrases"] > 100
    assert {name for name, _ in counts["top_entities"]} == {"New York", "United States", "World War II"}
    # The tokens of each occurrence are joined: at the entity level, or inside a longer phrase that holds the
    # entity ("New York City").
    vocab = bert_tokenizer.get_vocab()
    new, york = vocab["new"], vocab["york"]
    joined = seen = 0
    for document in coded_sentences(store)[:200]:
        for ids, codes in document:
            assert len(ids) == len(codes)
            for i in range(1, len(ids)):
                if ids[i - 1] == new and ids[i] == york:
                    seen += 1
                    joined += codes[i] == ENTITY
    assert seen > 0 and joined >= seen / 2


def test_text_without_letters_is_refused(tmp_path, shared_data_module, bert_tokenizer):
    corpus = tmp_path / "digits.txt"
    corpus.write_text("123 456 , 789 .\n\n3.14 -- 2.71 !!!\n")
    with pytest.raises(DataError, match=rf"{corpus} has no letters"):
        units_store([corpus], tmp_path / "cache", bert_tokenizer, sources())


def test_presegmented_corpus(tmp_path, shared_data_module, bert_tokenizer):
    corpus = tmp_path / "marked.txt"
    corpus.write_text("The {{Eiffel Tower}} stands in {{Paris}} . It is [[made of iron]] .\n\nA second document .\n")
    store = units_store([corpus], tmp_path / "cache", bert_tokenizer, sources(presegmented=True))
    first = coded_sentences(store)[0]
    tokens = [bert_tokenizer.id_to_token(i) for i in first[0][0]]
    assert "{" not in tokens and "[" not in tokens  # the marks are gone
    codes = first[0][1]
    tower = tokens.index("tower")
    assert codes[1] == NONE and set(codes[2:tower]) <= {WORD, ENTITY} and codes[tower] == ENTITY  # Eiffel Tower
    assert codes[tower + 1] == NONE  # stands
    second = dict(zip([bert_tokenizer.id_to_token(i) for i in first[1][0]], first[1][1], strict=True))
    assert second["of"] == PHRASE and second["iron"] == PHRASE and second["made"] == NONE


def test_chinese_words_by_jieba(tmp_path, shared_data_module):
    pytest.importorskip("jieba")
    from tests.tasks.conftest import tiny_tokenizer

    text = "我爱北京天安门。北京是中国的首都。"
    assert words_of(text, "jieba")[:4] == ["我", "爱", "北京", "天安门"]
    corpus = tmp_path / "zh.txt"
    corpus.write_text(text + "\n")
    tokenizer = tiny_tokenizer([text] * 5, vocab_size=60)
    store = units_store([corpus], tmp_path / "cache", tokenizer, sources(word_segmenter="jieba", collocation_passes=0))
    ids, codes = coded_sentences(store)[0][0]
    tokens = [tokenizer.id_to_token(i) for i in ids]
    # Characters are the tokens; jieba's words join them at the word level (what Chinese BERT-wwm masks whole).
    assert tokens[:7] == ["我", "爱", "北", "京", "天", "安", "门"]
    assert codes[:7] == [NONE, NONE, NONE, WORD, NONE, WORD, WORD]


def test_collocations_counted_in_pieces_find_the_phrases_counted_in_memory(tmp_path, monkeypatch):
    """Phrases learned while preparing a store (each piece counted apart, counts spilled to disk in sorted runs and
    merged as streams) are the phrases ``learn_phrases`` finds over the same sentences in memory."""
    from plm_toolkit.data.sources.documents import split_sentences
    from plm_toolkit.data.units import collocations
    from tests.tasks.conftest import tiny_tokenizer

    rng = random.Random(3)
    filler = [f"w{k}" for k in range(150)]
    names = ["New York", "Stock Exchange", "Buenos Aires", "Ada Lovelace", "World War II"]
    lines = []
    for _ in range(300):
        words = [rng.choice(filler) for _ in range(12)]
        for _ in range(rng.randrange(3)):
            words.insert(rng.randrange(len(words)), rng.choice(names))
        if rng.random() < 0.3:
            words.insert(rng.randrange(len(words)), "New York Stock Exchange")
        lines.append(" ".join(words) + ". " + " ".join(rng.choice(filler) for _ in range(5)) + ".")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(lines) + "\n")
    sentences = [words_of(s) for line in lines for s in split_sentences(line)]
    expected = learn_phrases(lambda: iter(sentences), min_count=5, threshold=20.0)
    assert ("New", "York", "Stock", "Exchange") in expected and ("Buenos", "Aires") in expected
    monkeypatch.setattr(collocations, "SPILL_ENTRIES", 64)  # many runs per piece
    units = sources(collocation_threshold=20.0)
    tokenizer = tiny_tokenizer(lines, vocab_size=200)
    store = units_store([corpus], tmp_path / "cache", tokenizer, units, shard_bytes=4096)
    assert store.manifest["splits"]["train"]["shards"] > 3
    learned = (store.folder / "phrases.txt").read_text(encoding="utf-8").splitlines()
    assert {tuple(line.split(" ")) for line in learned} == expected
    assert not (store.folder / ".collocations").exists()  # the runs are removed
