"""Text kept as written: running-text layouts decode back to the corpus, documents are what data.document_boundary
says, sentence layouts lose no character, and every tokenizer setting reaches the tokenizer cache key."""

import itertools

import pytest
from omegaconf import OmegaConf

from plm_toolkit.core.data_schema import DataConfig, TokenizerConfig, TokenizerKind
from plm_toolkit.data.build import prepare_pretraining_data
from plm_toolkit.data.sources.corpus import iter_documents, read_documents
from plm_toolkit.data.sources.documents import document_sentences, sentence_starts, split_text
from plm_toolkit.data.tokenization.pipelines import running_text_tokenizer
from plm_toolkit.data.tokenization.tokenizer import load_or_train_tokenizer
from tests.data.tokenization.test_tokenizer import trained_cfg

# Documents with what a joining reader loses: newlines inside a document, runs of spaces, tabs, a leading space,
# trailing spaces, sentence ends followed by two spaces, upper case.
DOCUMENTS = [
    "First: Hello world.  Two spaces!\nNext line? Yes.\n\tA tabbed line, then trailing spaces  ",
    ' = A Title =\nIt starts with a space. And UPPER case, "quotes" and (brackets).',
    "Third document\nwith two lines.",
    "Short.",
    "The last one ends here! Or does it? It does.",
]


def corpus_cfg(tmp_path, kind, **fields) -> DataConfig:
    corpus = tmp_path / "corpus.txt"
    # Blank lines of spaces and runs of them separate documents; the final newline ends the file.
    corpus.write_text("\n\n".join(DOCUMENTS[:2]) + "\n  \n\n" + "\n\n".join(DOCUMENTS[2:]) + "\n", encoding="utf-8")
    tokenizer = TokenizerConfig(kind=kind, vocab_size=300, min_frequency=1, lowercase=False)
    return OmegaConf.structured(
        DataConfig(train_files=[str(corpus)], cache_dir=str(tmp_path / "cache"), tokenizer=tokenizer, **fields)
    )


def stream_of(windows, stride: int) -> list[int]:
    """The token stream that overlapping windows (a new one every ``stride`` tokens) were cut from."""
    return list(windows[0]) + [t for w in windows[1:] for t in w[len(w) - stride :]]


@pytest.mark.parametrize("kind", [TokenizerKind.character, TokenizerKind.gpt2_bpe, TokenizerKind.unigram])
def test_stream_windows_decode_to_the_documents_exactly(tmp_path, kind):
    data = prepare_pretraining_data(corpus_cfg(tmp_path, kind, max_seq_len=8), "streams", seed=0, window=(9, 8))
    separator = data.vocab.document_separator
    stream = stream_of(data.train["input_ids"], 8)
    pieces = [list(g) for is_separator, g in itertools.groupby(stream, lambda t: t == separator) if not is_separator]
    as_written = running_text_tokenizer(data.tokenizer)
    decoded = [as_written.decode(piece, skip_special_tokens=False) for piece in pieces]
    # The windows drop the stream's tail that fills no whole window: every document but maybe the last is whole.
    assert decoded[:-1] == DOCUMENTS[: len(decoded) - 1] and DOCUMENTS[len(decoded) - 1].startswith(decoded[-1])
    assert len(decoded) >= len(DOCUMENTS) - 1


@pytest.mark.parametrize("kind", [TokenizerKind.character, TokenizerKind.gpt2_bpe, TokenizerKind.unigram])
def test_full_sentence_blocks_decode_to_the_text_and_start_where_sentences_do(tmp_path, kind):
    data = prepare_pretraining_data(corpus_cfg(tmp_path, kind, max_seq_len=64), "full_sentences", seed=0)
    as_written = running_text_tokenizer(data.tokenizer)
    # Special tokens (the template's and the separator between documents) are skipped.
    blocks = [as_written.decode(row, skip_special_tokens=True) for row in data.train["input_ids"]]
    text = "".join(DOCUMENTS)
    assert "".join(blocks) == text
    offsets = [0]
    for document in DOCUMENTS:
        offsets.append(offsets[-1] + len(document))
    sentence_starts_ = {o + s for o, d in zip(offsets, DOCUMENTS, strict=False) for s in sentence_starts(d)}
    block_starts = [sum(len(b) for b in blocks[:k]) for k in range(len(blocks))]
    assert len(blocks) > 2 and set(block_starts) <= sentence_starts_ | set(offsets)


def test_document_boundaries():
    text = "a b\nc\n\n\n  \nd\n \t\ne\n"
    assert split_text(text, "blank_line") == ["a b\nc", "d", "e"]
    assert split_text(text, "line") == ["a b", "c", "d", "e"]
    assert split_text(text, "file") == [text]
    assert split_text("  lead\n\ntrail  \n", "blank_line") == ["  lead", "trail  "]
    assert split_text("\n \n", "blank_line") == [] and split_text(" \n", "file") == []


def test_a_whole_file_is_one_text_with_its_blank_lines(tmp_path):
    play = "ROMEO:\nSpeak.\n\nJULIET:\nSpeak, speak.\n"
    (tmp_path / "play.txt").write_text(play, encoding="utf-8")
    cfg = DataConfig(train_files=[str(tmp_path / "play.txt")], cache_dir=str(tmp_path / "c"), document_boundary="file")
    assert list(iter_documents(read_documents(cfg, "train"))) == [play]
    cfg.tokenizer = TokenizerConfig(kind=TokenizerKind.character, vocab_size=100)
    data = prepare_pretraining_data(cfg, "streams", seed=0, window=(9, 8))
    stream = stream_of(data.train["input_ids"], 8)
    assert data.tokenizer.decode(stream[: len(play)]) == play[: len(stream)]


def test_sentence_layouts_keep_every_character_but_the_whitespace_between_sentences():
    for document in DOCUMENTS:
        sentences = document_sentences(document)
        assert all(s == s.strip() and s for s in sentences)
        assert "".join("".join(sentences).split()) == "".join(document.split())


def test_the_character_tokenizer_keeps_case_and_lowercase_is_in_the_cache_key(tmp_path):
    text = "Hello World.\nHELLO again, world!\n"
    cased = load_or_train_tokenizer(trained_cfg(tmp_path, text, kind=TokenizerKind.character))
    assert cased.decode(cased.encode(text).ids) == text  # case and newlines kept by default
    lowered = load_or_train_tokenizer(trained_cfg(tmp_path, text, kind=TokenizerKind.character, lowercase=True))
    assert lowered.decode(lowered.encode(text).ids) == text.lower()
    # Asked again without lowercase, the cached cased tokenizer comes back, not the lowercased one.
    again = load_or_train_tokenizer(trained_cfg(tmp_path, text, kind=TokenizerKind.character, lowercase=False))
    assert again.to_str() == cased.to_str()
    unigram = load_or_train_tokenizer(trained_cfg(tmp_path, text, kind=TokenizerKind.unigram, lowercase=False))
    assert "H" in "".join(unigram.encode(text).tokens)
