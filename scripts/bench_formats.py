"""The corpus formats users bring, measured: Parquet preparation against JSONL of the same text (throughput and peak
memory), and the Megatron-LM round trip (our export read by megatron-core equals our store, id for id).

A corpus of --size-mb MB of text is built from WikiText-2's articles as in scripts/bench_data.py, written as JSONL
(one document a row) and as Parquet (row groups of --row-group-rows documents, snappy, as the Hub's exports), both
streamed so that building them holds one row group at a time. Then, each in a subprocess whose peak anonymous memory
is sampled (bench_data.measured):
  * the tokenizer is trained once (plm-prepare on the JSONL file) and given to every timed run;
  * jsonl / parquet: plm-prepare with --processes workers, alternating, --repeats times, each keeping its best; the
    throughput is MB of text a second for both (the same text), and the stores' ids are compared in corpus order;
  * parquet_quarter: the Parquet preparation of a quarter of the corpus: memory that does not grow with the corpus;
  * megatron: plm-export STORE OUT --format megatron, then megatron-core's IndexedDataset reads OUT/train: its
    sequences are compared with the store's documents followed by the end-of-text id (sha256 of the ids), and the
    stream windows plm-train cuts from OUT/train with those it cuts from the store.

    python scripts/bench_formats.py --size-mb 20

Prints one JSON object (progress on stderr). Needs ../shared/data/wikitext2/wiki.test.raw (or --source) and, for
the round trip, megatron-core (``pip install megatron-core``; without it that part is reported as skipped).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

from bench_data import DEFAULT_SOURCE, MODELS, log, make_corpus, measured, preparation_row  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=float, default=20.0, help="corpus text in MB")
    parser.add_argument("--processes", type=int, default=2, help="plm-prepare's worker processes")
    parser.add_argument("--repeats", type=int, default=2, help="alternating timed runs; each keeps its best")
    parser.add_argument(
        "--row-group-rows", type=int, default=100, help="documents per Parquet row group (WikiText articles: 2 MB)"
    )
    parser.add_argument("--max-seq-len", type=int, default=128)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/plm_bench_formats"))
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="WikiText raw text to build from")
    return parser.parse_args(argv)


def documents(path: Path):
    """The documents of a blank-line-separated text file, one at a time."""
    current: list[str] = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                current.append(line.rstrip("\n"))
            elif current:
                yield "\n".join(current)
                current = []
    if current:
        yield "\n".join(current)


def write_tables(text: Path, jsonl: Path, parquet: Path, rows: int, limit: int | None = None) -> int:
    """JSONL and Parquet of the documents of ``text`` (at most ``limit`` bytes of them); returns the text bytes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([("id", pa.int64()), ("text", pa.string())])
    written, batch, number = 0, [], 0
    with open(jsonl, "w", encoding="utf-8") as out, pq.ParquetWriter(parquet, schema, compression="snappy") as table:
        for document in documents(text):
            if limit is not None and written >= limit:
                break
            out.write(json.dumps({"text": document}) + "\n")
            batch.append(document)
            written += len(document.encode("utf-8"))
            if len(batch) == rows:
                table.write_table(pa.table({"id": range(number, number + rows), "text": batch}, schema=schema))
                number, batch = number + rows, []
        if batch:
            table.write_table(pa.table({"id": range(number, number + len(batch)), "text": batch}, schema=schema))
    return written


def ids_digest(store: Path, split: str = "train") -> str:
    """sha256 of a store's ids in corpus order (the shards may be cut differently)."""
    digest = hashlib.sha256()
    for shard in sorted((store / split).glob("*.bin")):
        digest.update(shard.read_bytes())
    return digest.hexdigest()


ROUND_TRIP = """
import hashlib, json, sys
import numpy as np
from megatron.core.datasets.indexed_dataset import IndexedDataset
from omegaconf import OmegaConf
from plm_toolkit.core.data_schema import DataConfig
from plm_toolkit.data.layouts.windows import StreamWindows
from plm_toolkit.data.store.foreign import open_foreign_store
from plm_toolkit.data.store.token_store import TokenStore
from plm_toolkit.data.tokenization.tokenizer import vocab_from_tokenizer
store_folder, exported, cache, length = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
store = TokenStore(store_folder)
separator = vocab_from_tokenizer(store.tokenizer).document_separator
ours, theirs = hashlib.sha256(), hashlib.sha256()
split = store.split("train")
for shard in split.shards:
    ours.update(np.insert(np.asarray(shard.ids), np.asarray(shard.array("document_ends")), separator).tobytes())
dataset = IndexedDataset(exported)
for k in range(len(dataset)):
    theirs.update(dataset[k].astype(split.shards[0].ids.dtype).tobytes())
cfg = OmegaConf.merge(OmegaConf.structured(DataConfig), {"store": exported, "cache_dir": cache,
                      "tokenizer": {"path": store_folder + "/tokenizer.json"}})
foreign = open_foreign_store(cfg, "streams").split("train")
windows = [StreamWindows(s, separator, length + 1, length) for s in (split, foreign)]
same = len(windows[0]) == len(windows[1]) and all(
    np.array_equal(windows[0].window(k), windows[1].window(k)) for k in range(len(windows[0])))
print(json.dumps({"documents": split.num_documents, "megatron_documents": len(dataset.document_indices) - 1,
                  "megatron_sequences": len(dataset), "ids_sha256_store": ours.hexdigest(),
                  "ids_sha256_megatron_core": theirs.hexdigest(), "ids_equal": ours.digest() == theirs.digest(),
                  "stream_windows": len(windows[0]), "stream_windows_equal": bool(same)}))
"""


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    work = args.workdir
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        result = measure(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result, indent=1))
    return result


def measure(args: argparse.Namespace, work: Path) -> dict:
    python = sys.executable
    size = make_corpus(args.source, work / "corpus.txt", int(args.size_mb * 1e6))
    text_bytes = write_tables(work / "corpus.txt", work / "corpus.jsonl", work / "corpus.parquet", args.row_group_rows)
    quarter = write_tables(work / "corpus.txt", work / "quarter.jsonl", work / "quarter.parquet", args.row_group_rows,
                           text_bytes // 4)  # fmt: skip
    result = {"corpus_text_mb": text_bytes / 1e6, "generated_mb": size / 1e6, "processes": args.processes,
              "file_mb": {n: (work / f"corpus.{n}").stat().st_size / 1e6 for n in ("jsonl", "parquet")}}  # fmt: skip
    common = [*MODELS["gpt2"][0], f"data.max_seq_len={args.max_seq_len}", f"data.cache_dir={work / 'cache'}",
              f"data.tokenizer.vocab_size={args.vocab_size}"]  # fmt: skip
    prepare = [python, "-m", "plm_toolkit.commands.prepare", *common]
    measured([*prepare, f"data.train_files=[{work / 'corpus.jsonl'}]", f"data.store={work / 'store_0'}"])
    tokenizer = work / "store_0" / "tokenizer.json"
    given = [f"data.tokenizer.path={tokenizer}", f"data.num_proc={args.processes}"]
    one_thread = {"TOKENIZERS_PARALLELISM": "false"}
    for repeat in range(args.repeats):
        for name in ("jsonl", "parquet"):
            store = work / f"store_{name}"
            shutil.rmtree(store, ignore_errors=True)
            files = [f"data.train_files=[{work / f'corpus.{name}'}]", f"data.store={store}"]
            run = measured([*prepare, *given, *files], env=one_thread)
            row = preparation_row(store, run, text_bytes, args.processes)
            if row["seconds"] < result.get(name, {}).get("seconds", float("inf")):
                result[name] = row
            log(f"repeat {repeat}: {name} {row['mb_per_s']:.2f} MB/s, peak {row['peak_anon_mb']:.0f} MB")
    store = work / "store_quarter"
    files = [f"data.train_files=[{work / 'quarter.parquet'}]", f"data.store={store}"]
    result["parquet_quarter"] = preparation_row(store, measured([*prepare, *given, *files], env=one_thread), quarter,
                                                args.processes)  # fmt: skip
    parquet, jsonl = result["parquet"], result["jsonl"]
    result["parquet_vs_jsonl_throughput"] = parquet["mb_per_s"] / jsonl["mb_per_s"]
    result["parquet_vs_jsonl_cpu"] = parquet["mb_per_cpu_second"] / jsonl["mb_per_cpu_second"]
    result["parquet_vs_jsonl_peak_memory"] = parquet["peak_anon_mb"] / jsonl["peak_anon_mb"]
    result["parquet_peak_memory_full_vs_quarter"] = parquet["peak_anon_mb"] / result["parquet_quarter"]["peak_anon_mb"]
    result["same_ids_parquet_jsonl"] = ids_digest(work / "store_parquet") == ids_digest(work / "store_jsonl")
    exported = measured([python, "-m", "plm_toolkit.commands.export", str(work / "store_parquet"), str(work /
    "megatron"),
                         "--format", "megatron"])  # fmt: skip
    result["megatron_export"] = {"seconds": exported["seconds"], "peak_anon_mb": exported["peak_anon_mb"]}
    try:
        import importlib.util

        available = importlib.util.find_spec("megatron.core") is not None
    except ModuleNotFoundError:
        available = False
    if available:
        check = measured([python, "-c", ROUND_TRIP, str(work / "store_parquet"), str(work / "megatron" / "train"),
                          str(work / "cache"), str(args.max_seq_len)])  # fmt: skip
        result["megatron_round_trip"] = json.loads(check["stdout"].strip().splitlines()[-1])
    else:
        result["megatron_round_trip"] = "skipped: megatron-core is not installed (pip install megatron-core)"
    return result


if __name__ == "__main__":
    main()
