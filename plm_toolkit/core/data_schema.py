"""Typed schema of the data group (``data=``): the corpus, its token store, the tokenizer and a blend's sources. Its
own module beside ``schema.py`` so that the data floor types its arguments with it (``data_cfg: DataConfig``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from plm_toolkit.core.choices import choices

TokenizerKind = choices(
    "TokenizerKind", "auto", "wordpiece", "bpe", "gpt2_bpe", "unigram", "t5_unigram", "character", "word"
)
DocumentBoundary = choices("DocumentBoundary", "blank_line", "line", "file")
Packing = choices("Packing", "auto", "sentence_pairs", "segment_pairs", "full_sentences", "streams", "sentence_streams")


class NewRowsInit(str, Enum):
    mean_covariance = "mean_covariance"
    pieces_mean = "pieces_mean"


@dataclass
class VocabularyExtensionConfig:
    # A UTF-8 file of tokens to add, one a line (blank lines and tokens the vocabulary holds are skipped); each
    # becomes one id (an added token, matched as a whole word, after the tokenizer's normalizer), added as the
    # normalizer writes it: lines it makes one token (Qwzxyq, qwzxyq over an uncased vocabulary) add one id.
    tokens_file: str | None = None
    # Add the N words of the training corpus (a sample of data.tokenizer.train_sample_bytes) that the checkpoint's
    # vocabulary splits most: ranked by occurrences x (pieces - 1), the pieces they would save. 0: none. With
    # tokens_file: N words besides the file's tokens.
    top_words: int = 0
    # How the new embedding rows (and a tied or untied output row and its bias) start: mean_covariance, sampled
    # around the old rows' mean with 1e-9 x their covariance (transformers' resize_token_embeddings, PR #33325; the
    # mean itself where the covariance is singular); pieces_mean, the mean of the rows of the pieces the old
    # vocabulary split the token into.
    init: NewRowsInit = NewRowsInit.mean_covariance


@dataclass
class TokenizerConfig:
    # A tokenizer.json, a WordPiece vocab.txt or a byte-level BPE vocab.json (with merges.txt beside it) to load;
    # null trains a vocabulary on the training files.
    path: str | None = None
    # Algorithm of a trained vocabulary: wordpiece (BERT), bpe (byte-level BPE with <s> </s> <pad> <mask> <unk>,
    # RoBERTa), gpt2_bpe (byte-level BPE with <|endoftext|> alone, GPT-2), unigram (SentencePiece-style unigram LM,
    # XLNet), t5_unigram (T5's: a cased unigram LM with <pad> </s> <unk> and 100 sentinels <extra_id_N> as the last
    # ids, within vocab_size), character (one token per character, for character-level LMs, where clm's bits per
    # token are bits per character), or auto: the model preset's choice (model.tokenizer).
    kind: TokenizerKind = TokenizerKind.auto
    # Size of a trained vocabulary (special tokens included).
    vocab_size: int = 8000
    # Lower-case before tokenizing (WordPiece also strips accents, as BERT uncased); null: the kind's own default,
    # true for wordpiece and unigram, false for character (every character kept as written). bpe, gpt2_bpe,
    # t5_unigram and word vocabularies are always cased.
    lowercase: bool | None = None
    # A piece must occur this often in the corpus to enter a trained vocabulary.
    min_frequency: int = 2
    # A trained vocabulary learns from at most this many characters of the training text: all of a smaller corpus,
    # else the same share from the start of every shard (a sample spread over the corpus, as SentencePiece's
    # input_sentence_size; its time and memory then stay the same however large the corpus grows).
    train_sample_bytes: int = 100_000_000
    # plm-train model.checkpoint=PATH only: tokens added to the checkpoint's vocabulary, with new embedding rows.
    extend: VocabularyExtensionConfig = field(default_factory=lambda: VocabularyExtensionConfig())


@dataclass
class SourceConfig:
    """One corpus of a weighted blend (``data.sources``, docs/pretraining-and-data.md)."""

    # Names the source in logs and metrics (eval_loss/<name>, blend_share/<name>): letters, digits, _ . -
    name: str = ""
    # Files or glob patterns, in the formats data.train_files takes; prepared into a token store of its own. A file
    # is named once in a blend (twice, by one source or two, it would be read twice: refused).
    files: list[str] = field(default_factory=list)
    # Share of the training examples drawn from this source, normalized over the sources (Megatron-LM's
    # --data-path 0.7 wiki 0.3 code): a source smaller than its share is repeated (more epochs), a larger one is
    # read in part. 0 or more, their sum finite.
    weight: float = 1.0
    # Held-out files of this source, scored alone (eval_loss/<name>) and within the overall eval_loss.
    validation_files: list[str] = field(default_factory=list)
    # This source's data.text_column (a JSONL field), where it differs; null: data.text_column.
    text_column: str | None = None
    # This source's data.document_boundary (blank_line, line, file), where it differs; null: data.document_boundary.
    document_boundary: DocumentBoundary | None = None


@dataclass
class DataConfig:
    # Name of the preset, for logs.
    name: str = "text_files"
    # Local files or glob patterns: UTF-8 text (a blank line separates documents, see document_boundary), JSONL
    # (.jsonl/.json, one document per row in the text_column field), .gz or .zst compressed or not, or Parquet
    # (.parquet, one document per row in the text_column column, read row group by row group).
    train_files: list[str] = field(default_factory=list)
    # Held-out files in the same formats; empty means no evaluation.
    validation_files: list[str] = field(default_factory=list)
    # A weighted blend of corpora in place of train_files/validation_files (which stay empty, e.g. data=text_files):
    # [{name: wiki, files: [wiki/*.txt], weight: 0.7, validation_files: [wiki_dev.txt]}, {name: code, ...}].
    # Each source has its own store; batches draw from them in the weights' proportions, deterministic in the seed.
    sources: list[SourceConfig] = field(default_factory=list)
    # A folder written by `datasets`' save_to_disk (a DatasetDict with train/validation, or one Dataset);
    # replaces train_files/validation_files when set.
    dataset_path: str | None = None
    # Column holding one document per row in a saved dataset or a Parquet file, or a JSONL row's field holding its
    # text.
    text_column: str = "text"
    # What a document is in a text file (and in a saved dataset's row): blank_line, blocks of lines separated by
    # one or more blank lines; line, every non-blank line; file, the whole file as written, blank lines included
    # (nanoGPT's tinyshakespeare). Running-text layouts (GPT, Transformer-XL, XLNet, T5, RoBERTa) keep each
    # document's text as written, newlines and spaces included, with the end-of-text (or separator) token between
    # documents.
    document_boundary: DocumentBoundary = DocumentBoundary.blank_line
    # The vocabulary: loaded from a file or trained on the training files (keys below).
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    # Tokens per sequence, special tokens included; at most model.max_position_embeddings.
    max_seq_len: int = 128
    # Probability of a shorter target length for a pair (BERT: 0.1), so the model also sees short inputs.
    short_seq_prob: float = 0.1
    # Sentence-pair layout: probability that segment B comes from another document (NSP negative).
    random_next_prob: float = 0.5
    # Sentence-pair layouts, training split: how many times the pairs are drawn, each draw with its own split points,
    # short targets and random next segments, all of them making up one epoch: the pairs half of BERT's
    # create_pretraining_data.py --dupe_factor (10 in its README; objective.dupe_factor is the masks half). One draw
    # trained for many epochs lets NSP memorize which pairs belong together; evaluation keeps one draw.
    pair_draws: int = 1
    # Packing: auto lets the objective choose (NSP needs sentence_pairs, SOP segment_pairs: two consecutive
    # segments of one document; full_sentences packs contiguous text across documents, RoBERTa's FULL-SENTENCES;
    # Transformer-XL and XLNet read streams, windows of one token stream dealt out in order so that consecutive
    # batches continue each row's text).
    packing: Packing = Packing.auto
    # Tokenizers and tokenized corpora are cached here, keyed by the files' contents and the settings. Default:
    # $PLM_TOOLKIT_CACHE, else ~/.cache/plm_toolkit (a variable set to nothing counts as unset; empty: the default).
    cache_dir: str = "${plm_cache_dir:}"
    # A token store folder (docs/data-store.md): plm-prepare writes it, plm-train reads it (and prepares it first
    # when it is missing or unfinished). null: a folder under cache_dir/stores keyed on the files and settings. Also
    # Megatron-LM's token files (PREFIX for PREFIX.bin + PREFIX.idx) or nanoGPT's (path/train.bin, val.bin beside it
    # for validation), read as they are with data.tokenizer.path, the tokenizer the ids come from.
    store: str | None = None
    # Worker processes that tokenize the corpus into the store; null: the CPU cores this process may use.
    num_proc: int | None = None
    # plm-prepare across nodes (docs/data-store.md): the store's shards are dealt out to prepare_parts jobs sharing
    # its folder, one per node (plm-prepare -m ... data.prepare_part=0,1,2,3); the last to finish writes the manifest.
    # Every job of one store takes the same number (a job with another is refused).
    prepare_parts: int = 1
    # Which of the prepare_parts shares this job tokenizes: 0 to prepare_parts - 1. plm-train ignores both keys.
    prepare_part: int = 0
    # Bytes of corpus text per store shard: each worker tokenizes one shard at a time (a compressed file is one
    # shard). null: a 64th of the split's bytes, at least 1 MB and at most 64 MB, so that a small corpus, too, keeps
    # every worker busy (the same store whatever data.num_proc).
    shard_bytes: int | None = None
    # Data-loader worker processes (0 loads in the training process).
    num_workers: int = 0


@dataclass
class ParallelDataConfig(DataConfig):
    """``data=parallel``: sentence pairs for translation. train_files / validation_files name a prefix per corpus
    (``corpus/train`` reads ``corpus/train.<source_lang>`` and ``corpus/train.<target_lang>``, line-aligned) or a
    ``.jsonl`` file with one key per language; max_seq_len is the longest sentence in tokens, end token included."""

    # Language of the input side: the suffix of its file, or its key in a JSONL row.
    source_lang: str = "en"
    # Language of the output side.
    target_lang: str = "de"
    # Padded tokens per batch on each side: sentence pairs of similar length are grouped until rows x longest
    # sentence reaches this on the source or the target side (the Transformer: about 25,000 per side per step, e.g.
    # 25000 on one device or 3125 on each of 8). trainer.batch_size is not used with parallel data.
    max_tokens: int = 4096
    # At most this many sentence pairs per batch (0: no limit beyond max_tokens).
    max_sentences: int = 0
