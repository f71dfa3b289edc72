"""The token store's data side at scale: preparation throughput and memory, training start-up, disk, against raw
``tokenizers`` and the ``datasets.map`` + concatenate-and-chunk pipeline of transformers' run_clm, on one corpus.

A corpus of --size-mb MB is generated in --workdir from WikiText-2's raw test split (its articles, repeated with a
counter so that no two documents are equal), then, each step in a subprocess whose peak anonymous memory (RssAnon
of it and its children, sampled every 50 ms) is recorded:
  * encode_batch: raw ``tokenizers`` throughput of the store's tokenizer on the same documents, one thread;
  * prepare_1 / prepare_2: plm-prepare with 1 and 2 worker processes (the tokenizer given, so only tokenizing is
    timed; the per-process rate is set beside encode_batch's);
  * train_start: plm-train (a tiny GPT-2) on the prepared store, from launch to the first optimizer step, and its
    peak anonymous memory (the data side of a run: the store is memory-mapped, examples are cut on the fly);
  * datasets_map: ``datasets.map(num_proc=N)`` tokenizing the same text + group_texts' concatenate-and-chunk into
    the same windows, its time, peak memory and cache size.

    python scripts/bench_data.py --size-mb 20                       # a quick check (about a minute here)
    python scripts/bench_data.py --size-mb 1000 --processes 2 --workdir /scratch/bench   # 1 GB

Prints one JSON object (progress on stderr). Needs ../shared/data/wikitext2/wiki.test.raw (or --source).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = REPO.parent / "shared" / "data" / "wikitext2" / "wiki.test.raw"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=float, default=20.0, help="generated corpus size in MB")
    parser.add_argument("--processes", type=int, default=2, help="worker processes of the parallel runs")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--max-seq-len", type=int, default=128)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/plm_bench_data"))
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="WikiText raw text to build from")
    parser.add_argument("--repeats", type=int, default=2, help="alternating timed runs; each keeps its best")
    parser.add_argument(
        "--models",
        nargs="*",
        default=list(MODELS),
        choices=list(MODELS),
        help="families whose store and first training steps are measured (memory, start-up)",
    )
    parser.add_argument("--skip-datasets", action="store_true", help="leave out the datasets.map pipeline")
    parser.add_argument(
        "--layouts-only",
        action="store_true",
        help="only each family's store and first steps (--models): no encode_batch reference, no datasets.map",
    )
    parser.add_argument("--keep", action="store_true", help="keep the workdir (corpus, stores, caches)")
    return parser.parse_args(argv)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def make_corpus(source: Path, path: Path, size: int) -> int:
    """Articles of ``source`` (one per ' = Title = ' heading, paragraphs one a line, a blank line between
    articles), repeated with a running number until ``size`` bytes; returns the bytes written."""
    text = source.read_text(encoding="utf-8").replace("\r\n", "\n")
    articles, current = [], []
    for line in (line.strip() for line in text.split("\n")):
        if re.match(r"^= [^=].* =$", line) and current:
            articles.append("\n".join(current))
            current = []
        if line:
            current.append(line)
    articles.append("\n".join(current))
    written = 0
    with open(path, "w", encoding="utf-8") as f:
        copy = 0
        while written < size:
            for article in articles:
                chunk = f"{article}\nCopy {copy}.\n\n"
                f.write(chunk)
                written += len(chunk.encode("utf-8"))
                if written >= size:
                    break
            copy += 1
    return written


def tree_anon_kb(pid: int) -> int:
    """RssAnon (kB) of a process and all its descendants."""
    total, stack = 0, [pid]
    while stack:
        current = stack.pop()
        try:
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("RssAnon:"):
                    total += int(line.split()[1])
            for task in Path(f"/proc/{current}/task").iterdir():
                stack += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return total


def measured(command: list[str], env: dict | None = None, until_file: Path | None = None) -> dict:
    """Run ``command``; its wall time, peak RssAnon of its process tree (MB), stdout, and the seconds until
    ``until_file`` first held something."""
    environment = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment)
    peak, marked, errors = 0, None, []

    def read_errors() -> None:
        errors.extend(process.stderr)

    reader = threading.Thread(target=read_errors, daemon=True)
    reader.start()
    while process.poll() is None:
        peak = max(peak, tree_anon_kb(process.pid))
        if until_file is not None and marked is None and until_file.is_file() and until_file.stat().st_size:
            marked = time.perf_counter() - start
        time.sleep(0.05)
    stdout = process.stdout.read()
    reader.join()
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{''.join(errors)[-3000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the command and every process it waited for
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return {"seconds": time.perf_counter() - start, "cpu_seconds": cpu, "peak_anon_mb": peak / 1024, "stdout": stdout,
            "marked": marked}  # fmt: skip


ENCODE = """
import json, sys, time
from plm_toolkit.data.sources.documents import split_text
from plm_toolkit.data.tokenization.pipelines import running_text_tokenizer
from plm_toolkit.data.tokenization.tokenizer import load_tokenizer
tokenizer = running_text_tokenizer(load_tokenizer(sys.argv[1]))
text = open(sys.argv[2], encoding="utf-8").read()
documents = split_text(text, "blank_line")
start, cpu = time.perf_counter(), time.process_time()
batch, size, tokens = [], 0, 0
for document in documents:
    batch.append(document)
    size += len(document)
    if size >= 1 << 20:
        tokens += sum(len(e.ids) for e in tokenizer.encode_batch(batch, add_special_tokens=False))
        batch, size = [], 0
tokens += sum(len(e.ids) for e in tokenizer.encode_batch(batch, add_special_tokens=False))
print(json.dumps({"seconds": time.perf_counter() - start, "cpu_seconds": time.process_time() - cpu, "tokens": tokens}))
"""

DATASETS_MAP = """
import json, sys, time
from itertools import chain
import datasets
from plm_toolkit.data.tokenization.pipelines import running_text_tokenizer
from plm_toolkit.data.tokenization.tokenizer import load_tokenizer
tokenizer_file, corpus, cache = sys.argv[1:4]
processes, block = int(sys.argv[4]), int(sys.argv[5])
start = time.perf_counter()
raw = datasets.load_dataset("text", data_files={"train": [corpus]}, sample_by="paragraph", cache_dir=cache,
                            split="train")
def tokenize(batch):
    tokenizer = running_text_tokenizer(load_tokenizer(tokenizer_file))
    return {"input_ids": [e.ids for e in tokenizer.encode_batch(batch["text"], add_special_tokens=False)]}
tokenized = raw.map(tokenize, batched=True, num_proc=processes, remove_columns=["text"])
def group_texts(examples):  # transformers' run_clm: concatenate, then cut into blocks
    ids = list(chain(*examples["input_ids"]))
    total = len(ids) // block * block
    return {"input_ids": [ids[i : i + block] for i in range(0, total, block)]}
grouped = tokenized.map(group_texts, batched=True, num_proc=processes)
print(json.dumps({"seconds": time.perf_counter() - start, "examples": len(grouped)}))
"""


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


# Each layout's family at a tiny size: (model overrides, the layout it reads).
MODELS = {
    "gpt2": (["model=gpt2", "model.hidden_size=64", "model.num_heads=2", "model.intermediate_size=128"], "streams"),
    "bert": (["model=bert_tiny"], "sentence_pairs"),
    "roberta": (["model=roberta_tiny"], "full_sentences"),
    "t5": (["model=t5_tiny"], "streams (span corruption)"),
    "elmo": (["model=elmo_tiny", "data.max_seq_len=20"], "sentence_streams"),
    "ernie": (["model=ernie_tiny"], "full_sentences with knowledge units (collocations learned)"),
}
TRAIN = ["trainer.batch_size=8", "trainer.log_every=1", "trainer.eval_every=0", "trainer.save_every=0",
         "trainer.progress_bar=false", "trainer.tensorboard=false", "hardware=cpu"]  # fmt: skip


def preparation_row(store: Path, run: dict, size: int, processes: int) -> dict:
    manifest = json.loads((store / "manifest.json").read_text())
    seconds = manifest["prepared"]["seconds"]
    bins = sum(p.stat().st_size for p in store.rglob("*.bin"))
    return {
        "seconds": seconds,
        "command_seconds": run["seconds"],
        "mb_per_s": size / 1e6 / seconds,
        "mb_per_s_per_process": size / 1e6 / seconds / processes,
        # The workers' CPU time for the shards (reading, tokenizing, writing): a shared machine's load changes the
        # wall time, not this; beside it the command's whole CPU time (interpreter and torch start-up included).
        "mb_per_cpu_second": size / 1e6 / manifest["prepared"]["worker_cpu_seconds"],
        "command_cpu_seconds": run["cpu_seconds"],
        "peak_anon_mb": run["peak_anon_mb"],
        "shards": manifest["splits"]["train"]["shards"],
        "bytes_per_token": bins / manifest["splits"]["train"]["tokens"],
        "index_bytes": folder_bytes(store) - bins,
    }


def against_encode_batch(args, work: Path, corpus: Path, size: int, common: list[str], result: dict) -> Path:
    """GPT-2's preparation with 1 and ``args.processes`` workers against raw ``encode_batch`` on the same text, and
    plm-train's start-up on that store, into ``result``; returns the tokenizer they share."""
    python = sys.executable
    gpt2 = MODELS["gpt2"][0]
    prepare = [python, "-m", "plm_toolkit.commands.prepare", *gpt2, *common]
    # The tokenizer, trained once on the default sample; the timed runs below are given it.
    first = measured([*prepare, f"data.store={work / 'store_0'}", "data.num_proc=1"])
    tokenizer = work / "store_0" / "tokenizer.json"
    log(f"tokenizer trained and store prepared in {first['seconds']:.1f} s")
    result["first_preparation"] = {"seconds": first["seconds"], "peak_anon_mb": first["peak_anon_mb"]}
    # Raw encode_batch and preparation alternate, and each keeps its best time: a shared machine's load falls on
    # both alike.
    one_thread = {"TOKENIZERS_PARALLELISM": "false"}
    for repeat in range(args.repeats):
        encoded = measured([python, "-c", ENCODE, str(tokenizer), str(corpus)], env=one_thread)
        raw = json.loads(encoded["stdout"])
        if raw["seconds"] < result.get("encode_batch_seconds", float("inf")):
            result.update(encode_batch_seconds=raw["seconds"], tokens=raw["tokens"])
            result["encode_batch_mb_per_cpu_second"] = size / 1e6 / raw["cpu_seconds"]
        for processes in sorted({1, args.processes}):
            store = work / f"store_{processes}"
            shutil.rmtree(store, ignore_errors=True)
            given = [f"data.tokenizer.path={tokenizer}", f"data.store={store}", f"data.num_proc={processes}"]
            row = preparation_row(store, measured([*prepare, *given], env=one_thread), size, processes)
            key = f"prepare_{processes}"
            if row["seconds"] < result.get(key, {}).get("seconds", float("inf")):
                result[key] = row
            log(f"repeat {repeat}: encode_batch {size / 1e6 / raw['seconds']:.2f} MB/s, {processes} process(es) "
                f"{row['mb_per_s']:.2f} MB/s")  # fmt: skip
    result["encode_batch_mb_per_s"] = size / 1e6 / result["encode_batch_seconds"]
    one, many = result["prepare_1"], result[f"prepare_{args.processes}"]
    result["per_process_vs_encode_batch"] = one["mb_per_s"] / result["encode_batch_mb_per_s"]
    result["per_cpu_second_vs_encode_batch"] = one["mb_per_cpu_second"] / result["encode_batch_mb_per_cpu_second"]
    result["speedup"] = many["mb_per_s"] / one["mb_per_s"]
    # plm-train with the overrides plm-prepare had and the store: start-up to the first optimizer step (its line in
    # metrics.jsonl), and the run's peak anonymous memory.
    train = [python, "-m", "plm_toolkit.commands.train", *prepare[3:], f"data.tokenizer.path={tokenizer}",
             f"data.store={work / 'store_1'}", "trainer.max_steps=20", *TRAIN]  # fmt: skip
    train.append(f"hydra.run.dir={work / 'run'}")
    started = measured(train, until_file=work / "run" / "metrics.jsonl")
    result["train"] = {"seconds": started["seconds"], "first_step_seconds": started["marked"],
                       "peak_anon_mb": started["peak_anon_mb"]}  # fmt: skip
    return tokenizer


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if not args.source.is_file():
        raise SystemExit(f"error: {args.source} not found; give --source (WikiText-2's wiki.test.raw)")
    work = args.workdir
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    corpus = work / "corpus.txt"
    size = make_corpus(args.source, corpus, int(args.size_mb * 1e6))
    log(f"corpus: {size / 1e6:.1f} MB in {corpus}")
    python = sys.executable
    common = ["data=text_files", f"data.train_files=[{corpus}]", f"data.cache_dir={work / 'cache'}",
              f"data.tokenizer.vocab_size={args.vocab_size}", f"data.max_seq_len={args.max_seq_len}"]  # fmt: skip
    result: dict = {"corpus_mb": size / 1e6, "processes": args.processes, "repeats": args.repeats}
    if not args.layouts_only:
        tokenizer = against_encode_batch(args, work, corpus, size, common, result)
    result["layouts"] = {}
    for name in args.models:  # each family's own store (its tokenizer trained), then a few steps on it
        overrides, layout = MODELS[name]
        store = work / f"store_{name}"
        prepared = measured([python, "-m", "plm_toolkit.commands.prepare", *overrides, *common, f"data.store={store}",
                             f"data.num_proc={args.processes}"])  # fmt: skip
        run = work / f"run_{name}"
        steps = [*overrides, *common, f"data.store={store}", "trainer.max_steps=5", *TRAIN, f"hydra.run.dir={run}"]
        trained = measured([python, "-m", "plm_toolkit.commands.train", *steps], until_file=run / "metrics.jsonl")
        result["layouts"][name] = {
            "layout": layout,
            "prepare_seconds": prepared["seconds"],
            "prepare_peak_anon_mb": prepared["peak_anon_mb"],
            "train_first_step_seconds": trained["marked"],
            "train_peak_anon_mb": trained["peak_anon_mb"],
            "store_mb": folder_bytes(store) / 1e6,
        }
        log(f"{name}: prepared in {prepared['seconds']:.1f} s, first step at {trained['marked']:.1f} s")
    if not (args.skip_datasets or args.layouts_only):
        cache = work / "datasets_cache"
        mapped = measured([python, "-c", DATASETS_MAP, str(tokenizer), str(corpus), str(cache), str(args.processes),
                           str(args.max_seq_len + 1)], env={"TOKENIZERS_PARALLELISM": "false"})  # fmt: skip
        result["datasets_map"] = {
            "seconds": json.loads(mapped["stdout"])["seconds"],
            "processes": args.processes,
            "peak_anon_mb": mapped["peak_anon_mb"],
            "cache_mb": folder_bytes(cache) / 1e6,
        }
        log(f"datasets.map: {result['datasets_map']['seconds']:.1f} s")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
