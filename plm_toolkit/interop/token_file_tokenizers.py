"""The tokenizer beside a token store exported as Megatron-LM's or nanoGPT's token files (``plm-export STORE OUT
--format megatron|nanogpt``, ``data/store/export.py``): ids alone say neither what they mean nor how many there
are, which the model's embedding must know.

- Both formats: ``tokenizer.json``, the store's own (what ``plm-train data.store=OUT/... data.tokenizer.path=
  OUT/tokenizer.json`` reads).
- megatron: ``tokenizer_config.json`` beside it (``PreTrainedTokenizerFast``, ``interop/hf_tokenizer.py``) and
  megatron-core's ``tokenizer_metadata.json`` (library ``huggingface``), so that megatron-core's
  ``MegatronTokenizer.from_pretrained(OUT)`` and Megatron-LM's ``--tokenizer-type HuggingFaceTokenizer
  --tokenizer-model OUT`` load it; their ``vocab_size`` is the vocabulary's.
- nanogpt: ``meta.json``, what nanoGPT's prepare.py pickles into ``meta.pkl`` (``vocab_size``, which its train.py
  sizes the model by, and ``itos`` / ``stoi``), as JSON: nothing here is pickled, and ``itos``'s keys are the ids
  as text. A character vocabulary's text is ``"".join(itos[i] ...)``; a subword one's, tokenizer.json's decoding.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from plm_toolkit.data.tokenization.tokenizer import TOKENIZER_FILE, load_tokenizer
from plm_toolkit.interop.hf_tokenizer import TokenizerLayout, export_tokenizer

MEGATRON_METADATA = "tokenizer_metadata.json"
NANOGPT_META = "meta.json"


def write_token_file_tokenizer(store: Path, into: Path, fmt: str) -> dict:
    """The tokenizer of the store at ``store`` written into the export folder ``into`` as ``fmt`` reads it; returns
    what the export's manifest records (the vocabulary size and the files)."""
    source = store / TOKENIZER_FILE
    tokenizer = load_tokenizer(source)
    size = tokenizer.get_vocab_size()
    if fmt == "megatron":
        export_tokenizer(source, TokenizerLayout(), {}, None).write(into)
        shutil.copyfile(source, into / TOKENIZER_FILE)  # the store's bytes, as plm-train reads them
        metadata = {"library": "huggingface", "model_type": "default", "class_name": None, "class_path": None,
                    "chat_template": None}  # fmt: skip
        (into / MEGATRON_METADATA).write_text(json.dumps(metadata, indent=2) + "\n", encoding="utf-8")
        return {"vocab_size": size, "tokenizer": [TOKENIZER_FILE, "tokenizer_config.json", MEGATRON_METADATA]}
    shutil.copyfile(source, into / TOKENIZER_FILE)
    vocabulary = tokenizer.get_vocab(with_added_tokens=True)
    meta = {
        "vocab_size": size,
        "itos": {str(i): token for token, i in sorted(vocabulary.items(), key=lambda item: item[1])},
        "stoi": dict(sorted(vocabulary.items(), key=lambda item: item[1])),
        "dtype": "uint16",
        "tokenizer": TOKENIZER_FILE,
    }
    (into / NANOGPT_META).write_text(json.dumps(meta, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return {"vocab_size": size, "tokenizer": [TOKENIZER_FILE, NANOGPT_META]}
