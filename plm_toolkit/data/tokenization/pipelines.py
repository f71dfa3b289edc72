"""Tokenizer pipelines: each family's normalizer, pre-tokenizer, decoder and template (its post-processor) around a
model, and the special tokens of a trained vocabulary. Loading and training live in
``data/tokenization/tokenizer.py`` and ``data/tokenization/vocabulary_training.py``."""

from __future__ import annotations

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from plm_toolkit.data.sources.chinese import CJK_CLASS

# The special tokens of a trained vocabulary, in id order: [PAD] is 0 so that zero-filled tensors are padding.
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
# A trained byte-level BPE vocabulary's, in RoBERTa's (fairseq's) order: <pad> is 1, as its checkpoints expect.
BPE_SPECIAL_TOKENS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")
# GPT-2's only special token: the end of a text, which also starts one and stands for unknown input.
END_OF_TEXT = "<|endoftext|>"
GPT2_SPECIAL_TOKENS = (END_OF_TEXT,)


def byte_level_tokenizer(model: models.Model, add_prefix_space: bool = True) -> Tokenizer:
    """RoBERTa's pipeline around a BPE model: bytes mapped to printable characters, no normalization (cased), and
    `<s> A </s>` / `<s> A </s></s> B </s>` when encoding with special tokens.

    A leading space is added to every text (add_prefix_space): the corpus is tokenized sentence by sentence, and
    a sentence's first word should get the same pieces as it would inside running text.
    """
    tokenizer = Tokenizer(model)
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space)
    tokenizer.decoder = decoders.ByteLevel()
    _add_bpe_specials(tokenizer)
    return tokenizer


def gpt2_tokenizer(model: models.Model, add_prefix_space: bool = True) -> Tokenizer:
    """GPT-2's pipeline: byte-level BPE with <|endoftext|> as its one special token.

    Its template, for fine-tuning, ends a text with <|endoftext|> (`A <|endoftext|>`, `A <|endoftext|> B
    <|endoftext|>`): the separator of a pair and, seen last by a causal model, the summary token a sentence-level
    head reads (GPT's "extract" token, Radford et al. 2018, section 3.3). Pretraining and generation encode
    without it.
    """
    tokenizer = byte_level_tokenizer(model, add_prefix_space)
    _add_gpt2_specials(tokenizer)
    return tokenizer


def is_gpt2_vocabulary(vocabulary: Tokenizer | models.Model) -> bool:
    """Whether a byte-level BPE vocabulary is GPT-2's: <|endoftext|> and none of RoBERTa's <s>."""
    return vocabulary.token_to_id(END_OF_TEXT) is not None and vocabulary.token_to_id("<s>") is None


def bpe_files_tokenizer(model: models.BPE) -> Tokenizer:
    """The pipeline a vocab.json + merges.txt gets: GPT-2's for GPT-2's vocabulary, with no space added before a
    text (GPT2Tokenizer's add_prefix_space=False), RoBERTa's for any other."""
    if is_gpt2_vocabulary(model):
        return gpt2_tokenizer(model, add_prefix_space=False)
    return byte_level_tokenizer(model)


def with_gpt2_template(tokenizer: Tokenizer) -> Tokenizer:
    """``tokenizer`` (a loaded tokenizer.json) with GPT-2's template where it is a BPE of GPT-2's vocabulary that
    wraps a text in no special token: GPT-2's tokenizer.json, or the export of a GPT language model
    (interop/hf_tokenizer.py), encodes a text alone; fine-tuning wraps it as it does the same vocabulary's
    vocab.json."""
    if isinstance(tokenizer.model, models.BPE) and is_gpt2_vocabulary(tokenizer) and _adds_nothing(tokenizer):
        _add_gpt2_specials(tokenizer)
    return tokenizer


def _adds_nothing(tokenizer: Tokenizer) -> bool:
    """Whether the template of ``tokenizer`` (its post-processor) wraps a text or a pair in no special token."""
    encodings = (tokenizer.encode("a", "b"), tokenizer.encode("a", "b", add_special_tokens=False))
    return encodings[0].ids == encodings[1].ids


def _add_gpt2_specials(tokenizer: Tokenizer) -> None:
    end = tokenizer.token_to_id(END_OF_TEXT)
    if end is None:
        return
    tokenizer.add_special_tokens([END_OF_TEXT])
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"$A {END_OF_TEXT}",
        pair=f"$A {END_OF_TEXT} $B:1 {END_OF_TEXT}:1",
        special_tokens=[(END_OF_TEXT, end)],
    )


def _add_bpe_specials(tokenizer: Tokenizer) -> None:
    present = [t for t in BPE_SPECIAL_TOKENS if tokenizer.token_to_id(t) is not None]
    tokenizer.add_special_tokens(present)
    cls_id, sep_id = tokenizer.token_to_id("<s>"), tokenizer.token_to_id("</s>")
    if cls_id is not None and sep_id is not None:
        tokenizer.post_processor = processors.RobertaProcessing(("</s>", sep_id), ("<s>", cls_id))


def chinese_split() -> pre_tokenizers.PreTokenizer:
    """A pre-tokenizer that makes every character of BERT's CJK ranges (data/sources/chinese.py) a word of its own."""
    return pre_tokenizers.Split(Regex(f"[{CJK_CLASS}]"), behavior="isolated")


def bert_tokenizer(model: models.Model, lowercase: bool) -> Tokenizer:
    """BERT's pipeline around a WordPiece model: normalize, split on whitespace and punctuation, `##` pieces,
    and `[CLS] A [SEP] (B [SEP])` when encoding with special tokens."""
    tokenizer = Tokenizer(model)
    # strip_accents=None follows lowercase, as in BERT's uncased and cased releases.
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
    # Every CJK ideograph a word of its own in BERT's ranges, which the normalizer's own misses in part.
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.BertPreTokenizer(), chinese_split()])
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    _add_specials(tokenizer)
    return tokenizer


def unigram_tokenizer(lowercase: bool) -> Tokenizer:
    """SentencePiece's pipeline around a unigram LM (Kudo 2018), as XLNet's: NFKC, "▁" marks a preceding space,
    no pre-splitting on punctuation."""
    tokenizer = Tokenizer(models.Unigram())
    steps = [normalizers.NFKC()] + ([normalizers.Lowercase()] if lowercase else [])
    tokenizer.normalizer = normalizers.Sequence(steps)
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    return tokenizer


def _add_specials(tokenizer: Tokenizer, xlnet_layout: bool = False) -> None:
    """Mark the vocabulary's special tokens as such (never split, skipped when decoding) and add the
    `[CLS] A [SEP] B [SEP]` template (XLNet's `A [SEP] B [SEP] [CLS]` for a unigram vocabulary), which needs
    their ids."""
    present = [t for t in SPECIAL_TOKENS if tokenizer.token_to_id(t) is not None]
    tokenizer.add_special_tokens(present)
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    if cls_id is not None and sep_id is not None and xlnet_layout:
        tokenizer.post_processor = processors.TemplateProcessing(
            single="$A [SEP] [CLS]:2",
            pair="$A [SEP] $B:1 [SEP]:1 [CLS]:2",
            special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
        )
    elif cls_id is not None and sep_id is not None:
        tokenizer.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]",
            pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
        )


def running_text_tokenizer(tokenizer: Tokenizer) -> Tokenizer:
    """A copy of ``tokenizer`` that encodes (and decodes) a document exactly as written: no space is added before
    the text (byte-level BPE's add_prefix_space, the unigram's "▁" prepended to a text), so a document's first
    word gets the pieces it has in the text, as GPT-2 and fairseq tokenize running text, and decoding gives the
    text back. Other tokenizers are returned as they are."""
    pre_tokenizer, decoder = tokenizer.pre_tokenizer, tokenizer.decoder
    byte_level = isinstance(pre_tokenizer, pre_tokenizers.ByteLevel) and pre_tokenizer.add_prefix_space
    metaspace = isinstance(pre_tokenizer, pre_tokenizers.Metaspace) and pre_tokenizer.prepend_scheme != "never"
    if not (byte_level or metaspace):
        return tokenizer
    copy = Tokenizer.from_str(tokenizer.to_str())
    if byte_level:
        copy.pre_tokenizer.add_prefix_space = False
    else:
        copy.pre_tokenizer.prepend_scheme = "never"
        if isinstance(decoder, decoders.Metaspace):
            copy.decoder.prepend_scheme = "never"
    return copy
