"""Bad inputs of the corpus formats users bring, through the real command line (plm-prepare, plm-train): a Parquet
file without the text column, with a non-string one, or cut short; a Megatron-LM pair whose .idx and .bin disagree,
or whose ids exceed the tokenizer's vocabulary; a nanoGPT .bin of odd length; a foreign token file given to a
sentence-pair layout or without its tokenizer. Each gets exit status 1 and one line on stderr starting ``error:``
that names the file or key, no traceback. Uses test_bad_inputs.py's harness (its command lines)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from plm_toolkit.data.store.token_files import MegatronWriter
from tests.bad_inputs.test_bad_inputs import Case, assert_one_error_line, run_cases
from tests.training.conftest import QUIET

GPT = ("model=gpt2_tiny", "model.hidden_size=32", "model.num_heads=2", "model.num_layers=1",
       "model.intermediate_size=37", "data=text_files", "data.max_seq_len=16", "data.cache_dir={tmp}/cache",
       "data.num_proc=1", "trainer.max_steps=1", *QUIET)  # fmt: skip
BERT_PAIRS = ("model=bert_tiny", "objective=mlm_nsp", "model.hidden_size=36", "model.num_heads=3",
              "model.num_layers=1", "model.intermediate_size=37", "data=text_files", "data.max_seq_len=16",
              "data.cache_dir={tmp}/cache", "trainer.max_steps=1", *QUIET)  # fmt: skip
TOKENIZER = "data.tokenizer.path={tmp}/tokenizer.json"
PARQUET = (*GPT, "data.tokenizer.vocab_size=300")

CASES = [
    Case("parquet_no_text_column", "prepare", (*PARQUET, "data.train_files=[{tmp}/no_text.parquet]", "data.store={tmp}/s1"), "{tmp}/no_text.parquet: no column 'text' (data.text_column); its columns are ['id', 'body']"),
    Case("parquet_other_text_column", "prepare", (*PARQUET, "data.train_files=[{tmp}/no_text.parquet]", "data.text_column=content", "data.store={tmp}/s2"), "{tmp}/no_text.parquet: no column 'content' (data.text_column)"),
    Case("parquet_number_column", "prepare", (*PARQUET, "data.train_files=[{tmp}/numbers.parquet]", "data.store={tmp}/s3"), "{tmp}/numbers.parquet: column 'text' (data.text_column) holds int64, not text"),
    Case("parquet_truncated", "prepare", (*PARQUET, "data.train_files=[{tmp}/truncated.parquet]", "data.store={tmp}/s4"), "{tmp}/truncated.parquet: not a readable Parquet file"),
    Case("parquet_truncated_train", "train", ("data.train_files=[{tmp}/truncated.parquet]", "data.tokenizer.vocab_size=300"), "{tmp}/truncated.parquet: not a readable Parquet file", base=GPT),
    Case("megatron_bin_short", "train", ("data.store={tmp}/short", TOKENIZER), "{tmp}/short.bin holds 38 bytes, but {tmp}/short.idx describes 20 ids of 2 byte(s) (40 bytes): the .idx and the .bin disagree", base=GPT),
    Case("megatron_pointers_wrong", "train", ("data.store={tmp}/pointers", TOKENIZER), "{tmp}/pointers.idx: sequence 1 starts at byte 12 of {tmp}/pointers.bin, not 20", base=GPT),
    Case("megatron_idx_truncated", "train", ("data.store={tmp}/cut", TOKENIZER), "{tmp}/cut.idx holds 60 bytes; its header", base=GPT),
    Case("megatron_idx_missing", "prepare", (*GPT, "data.store={tmp}/lonely", TOKENIZER), "{tmp}/lonely.idx is missing"),
    Case("megatron_ids_beyond_vocab", "train", ("data.store={tmp}/big_ids", TOKENIZER), "{tmp}/big_ids.bin holds token id 5000, outside the", base=GPT),
    Case("nanogpt_odd_length", "train", ("data.store={tmp}/odd/train.bin", TOKENIZER), "{tmp}/odd/train.bin holds 41 bytes, an odd number", base=GPT),
    Case("nanogpt_ids_beyond_vocab", "prepare", (*GPT, "data.store={tmp}/nano_big/train.bin", TOKENIZER), "{tmp}/nano_big/train.bin holds token id 40000, outside the"),
    Case("foreign_store_sentence_pairs", "train", ("data.store={tmp}/good", TOKENIZER), "data.store={tmp}/good is a Megatron-LM token file: documents of ids without sentence boundaries, which BERT's sentence pairs (NSP) need", base=BERT_PAIRS),
    Case("foreign_store_no_tokenizer", "train", ("data.store={tmp}/good",), "data.store={tmp}/good is a Megatron-LM token file: give data.tokenizer.path", base=GPT),
]  # fmt: skip


def gpt2_style_tokenizer(path: Path) -> Tokenizer:
    """A byte-level BPE of 300 tokens with GPT-2's <|endoftext|> alone."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())  # fmt: skip
    tokenizer.train_from_iterator([f"The cat {k} sat on the mat number {k}." for k in range(200)], trainer)
    tokenizer.save(str(path))
    return tokenizer


def megatron_pair(prefix: Path, documents: list[list[int]], dtype=np.uint16) -> None:
    writer = MegatronWriter(prefix, np.dtype(dtype))
    ids = np.concatenate([np.asarray(d) for d in documents])
    writer.add(ids, np.asarray([len(d) for d in documents]), np.arange(1, len(documents) + 1))
    writer.finish()


def setup(tmp: Path) -> None:
    gpt2_style_tokenizer(tmp / "tokenizer.json")
    texts = [f"Document {k} is about cats and mats." for k in range(40)]
    pq.write_table(pa.table({"id": list(range(40)), "body": texts}), tmp / "no_text.parquet")
    pq.write_table(pa.table({"text": list(range(40))}), tmp / "numbers.parquet")
    pq.write_table(pa.table({"text": texts}), tmp / "whole.parquet", row_group_size=10)
    data = (tmp / "whole.parquet").read_bytes()
    (tmp / "truncated.parquet").write_bytes(data[: len(data) // 2])
    documents = [list(range(10, 20)), list(range(30, 40))]
    megatron_pair(tmp / "good", documents * 20)
    for name in ("short", "pointers", "cut"):
        megatron_pair(tmp / name, documents)
    with open(tmp / "short.bin", "r+b") as f:
        f.truncate(38)
    idx = bytearray((tmp / "pointers.idx").read_bytes())
    idx[34 + 2 * 4 + 8 : 34 + 2 * 4 + 16] = (12).to_bytes(8, "little")  # sequence 1's pointer
    (tmp / "pointers.idx").write_bytes(bytes(idx))
    (tmp / "cut.idx").write_bytes((tmp / "cut.idx").read_bytes()[:60])
    megatron_pair(tmp / "lonely", documents)
    (tmp / "lonely.idx").unlink()
    megatron_pair(tmp / "big_ids", [[1, 2, 3, 5000, 4] * 10])
    (tmp / "odd").mkdir()
    (tmp / "odd" / "train.bin").write_bytes(bytes(41))
    (tmp / "nano_big").mkdir()
    np.asarray([1, 2, 40000, 0] * 20, np.uint16).tofile(tmp / "nano_big" / "train.bin")


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, dict]:
    root = tmp_path_factory.mktemp("bad_formats")
    setup(root)
    return run_cases(CASES, root)


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_format_input_gets_one_line(case, outcomes):
    assert_one_error_line(case, outcomes[case.name])
