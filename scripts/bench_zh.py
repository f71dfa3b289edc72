"""Chinese tokenizing and whole-word masking on the bundled Chinese corpus, against HFL's description; prints JSON.

Measured:
- tokens per character of a WordPiece trained here (every CJK ideograph its own token, as BERT's) on the corpus's
  validation file: overall, over its ideographs alone (1.0 by construction) and over the rest; beside it, where
  ../shared/data holds it, Google's English bert-base-uncased vocabulary on the same text (its [UNK] share shows
  why a Chinese vocabulary is needed);
- whole-word masking (``objective.masking=whole_word objective.word_segmenter=jieba``) over the training file's
  full-sentence examples and BERT's sentence pairs: the share of characters that become targets, the share of
  chosen words masked whole, the targets inside multi-character words, and the [MASK] / random / kept split; and
  the same counts for token masking (BERT's default), which cuts words;
- preparation: seconds to prepare the store of units (jieba) against a store of plain sentences.

HFL (Cui et al. 2019, "Pre-Training with Whole Word Masking for Chinese BERT", section 3.1 and table 1): words from
LTP's segmentation are masked whole, 15% of the characters overall, each masked character with its own label,
80% [MASK] / 10% random / 10% kept.

    .venv/bin/python scripts/bench_zh.py --vocab-size 3000 --max-seq-len 128
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "plm_toolkit" / "corpora" / "zh"
SHARED = Path(os.environ.get("PLM_SHARED_DATA", REPO.parent / "shared" / "data"))


def data_config(files: list[Path], cache: Path, tokenizer, max_seq_len: int):
    from omegaconf import OmegaConf

    from plm_toolkit.core.data_schema import DataConfig, TokenizerConfig

    cache.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(cache / "tokenizer.json"))
    return OmegaConf.structured(
        DataConfig(
            train_files=[str(f) for f in files],
            cache_dir=str(cache),
            tokenizer=TokenizerConfig(path=str(cache / "tokenizer.json")),
            max_seq_len=max_seq_len,
            num_proc=1,
        )
    )


def train_wordpiece(lines: list[str], vocab_size: int):
    from tokenizers import models, trainers

    from plm_toolkit.data.tokenization.pipelines import SPECIAL_TOKENS, _add_specials, bert_tokenizer

    tokenizer = bert_tokenizer(models.WordPiece(unk_token="[UNK]"), lowercase=True)
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                        continuing_subword_prefix="##", show_progress=False)  # fmt: skip
    tokenizer.train_from_iterator(lines, trainer=trainer)
    _add_specials(tokenizer)
    return tokenizer


def tokens_per_character(tokenizer, lines: list[str]) -> dict:
    from plm_toolkit.data.sources.chinese import is_chinese_char

    tokens = chinese_tokens = unknown = characters = chinese = 0
    for line, encoding in zip(lines, tokenizer.encode_batch(lines, add_special_tokens=False), strict=True):
        tokens += len(encoding.tokens)
        # A token of Chinese: one whose span holds an ideograph ([UNK] for one unseen in training included).
        chinese_tokens += sum(any(map(is_chinese_char, line[s:e])) for s, e in encoding.offsets)
        unknown += encoding.tokens.count("[UNK]")
    for line in lines:
        visible = [c for c in line if not c.isspace()]
        characters += len(visible)
        chinese += sum(map(is_chinese_char, visible))
    return {
        "vocab_size": tokenizer.get_vocab_size(),
        "tokens_per_character": round(tokens / characters, 4),
        "tokens_per_chinese_character": round(chinese_tokens / chinese, 4),
        "tokens_per_other_character": round((tokens - chinese_tokens) / max(characters - chinese, 1), 4),
        "unknown_share": round(unknown / tokens, 4),
        "characters": characters,
        "chinese_characters": chinese,
    }


def masking_counts(batch, out, tokenizer, vocab) -> dict:
    """Shares of characters masked, of chosen words masked whole, of targets in multi-character words."""
    from plm_toolkit.data.sources.chinese import is_chinese_char
    from plm_toolkit.objectives.masking import IGNORE_INDEX, word_spans

    chosen = out["mlm_labels"] != IGNORE_INDEX
    maskable = batch["attention_mask"].bool() & ~batch["special_tokens_mask"].bool()
    words = touched = whole = multi_touched = multi_whole = multi_targets = 0
    lengths = []
    for row in range(batch["input_ids"].shape[0]):
        positions = maskable[row].nonzero().flatten().tolist()
        codes = batch["units"][row]
        for word in word_spans(positions, [int(codes[p]) == 0 for p in positions]):
            tokens = [tokenizer.id_to_token(int(batch["input_ids"][row, p])) for p in word]
            picked = chosen[row, word]
            words += 1
            lengths.append(len(word))
            multi = len(word) > 1 and all(len(t) == 1 and is_chinese_char(t) for t in tokens)
            if bool(picked.any()):
                touched += 1
                whole += bool(picked.all())
                if multi:
                    multi_touched += 1
                    multi_whole += bool(picked.all())
            if multi:
                multi_targets += int(picked.sum())
    targets = int(chosen.sum())
    action = out["input_ids"][chosen]
    masked = int((action == vocab.mask_id).sum())
    kept = int((action == batch["input_ids"][chosen]).sum())
    return {
        "share_of_characters_masked": round(targets / int(maskable.sum()), 4),
        "chosen_words_masked_whole": round(whole / max(touched, 1), 4),
        "chosen_multi_character_words_masked_whole": round(multi_whole / max(multi_touched, 1), 4),
        "targets_inside_multi_character_words": round(multi_targets / max(targets, 1), 4),
        "mask_random_kept": [
            round(masked / targets, 3),
            round((targets - masked - kept) / targets, 3),
            round(kept / targets, 3),
        ],  # fmt: skip
        "mean_word_length_in_tokens": round(sum(lengths) / len(lengths), 3),
        "words": words,
        "targets": targets,
    }


def whole_word(args, tokenizer, cache: Path) -> dict:
    from plm_toolkit.data.batching.collate import collate
    from plm_toolkit.data.layouts.plan import DataPlan
    from plm_toolkit.data.layouts.registry import build_pretraining_examples
    from plm_toolkit.data.store.preparation import prepare_store
    from plm_toolkit.data.tokenization.tokenizer import vocab_from_tokenizer
    from plm_toolkit.data.units.words import WordSources
    from plm_toolkit.objectives.masking import MaskingTransform

    vocab = vocab_from_tokenizer(tokenizer)
    cfg = data_config([CORPUS / "train.txt"], cache, tokenizer, args.max_seq_len)
    started = time.perf_counter()
    prepare_store(cfg, "sentences")
    plain_seconds = time.perf_counter() - started
    started = time.perf_counter()
    prepare_store(cfg, "units", units=WordSources("jieba"))
    units_seconds = time.perf_counter() - started
    result = {"preparation_seconds": {"sentences": round(plain_seconds, 2), "jieba_units": round(units_seconds, 2)}}
    for layout in ("full_sentences", "sentence_pairs"):
        plan = DataPlan(layout, units=WordSources("jieba"))
        data = build_pretraining_examples(cfg, tokenizer, vocab, plan, "train", 1)
        batch = collate([data[i] for i in range(len(data))], vocab)
        seeds = range(batch["input_ids"].shape[0])
        row = {}
        for masking in ("whole_word", "token"):
            transform = MaskingTransform(vocab.size, vocab.mask_id, vocab.special_ids, masking=masking)
            row[masking] = masking_counts(batch, transform(batch, seeds), tokenizer, vocab)
        result[layout] = {"examples": len(data), **row}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab-size", type=int, default=3000)
    parser.add_argument("--max-seq-len", type=int, default=128)
    args = parser.parse_args()
    from plm_toolkit.data.tokenization.tokenizer import load_tokenizer

    train = [line for line in (CORPUS / "train.txt").read_text(encoding="utf-8").splitlines() if line.strip()]
    valid = [line for line in (CORPUS / "valid.txt").read_text(encoding="utf-8").splitlines() if line.strip()]
    tokenizer = train_wordpiece(train, args.vocab_size)
    result = {
        "corpus": str(CORPUS.relative_to(REPO)),
        "hfl_description": {
            "share_of_characters_masked": 0.15,
            "chosen_words_masked_whole": 1.0,
            "mask_random_kept": [0.8, 0.1, 0.1],
        },  # fmt: skip
        "tokens_per_character": {"trained_wordpiece": tokens_per_character(tokenizer, valid)},
    }
    english = SHARED / "models" / "bert-base-uncased" / "vocab.txt"
    if english.is_file():
        result["tokens_per_character"]["bert_base_uncased"] = tokens_per_character(load_tokenizer(english), valid)
    with tempfile.TemporaryDirectory() as folder:
        result["whole_word_masking"] = whole_word(args, tokenizer, Path(folder))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
