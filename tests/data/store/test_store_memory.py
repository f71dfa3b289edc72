"""Memory stays flat as the corpus grows: preparing a store and reading every example of it (stream windows and
full-sentence blocks through the loader) take about the same peak anonymous memory for a corpus ten times larger."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from plm_toolkit.core.resources import resource_path

READ_ALL = """
import json, sys
from omegaconf import OmegaConf
from plm_toolkit.core.data_schema import DataConfig, TokenizerConfig
from plm_toolkit.data.batching.collate import Collator
from plm_toolkit.data.build import prepare_pretraining_data
from plm_toolkit.data.batching.loader import BatchLayout, MicroBatches
corpus, cache, layout = sys.argv[1:4]
cfg = OmegaConf.structured(DataConfig(train_files=[corpus], cache_dir=cache, max_seq_len=63, shard_bytes=1 << 18,
                                      num_proc=2, tokenizer=TokenizerConfig(kind="character", vocab_size=200)))
data = prepare_pretraining_data(cfg, layout, seed=0)
batches = MicroBatches(data.train, BatchLayout(64, 1), 0, Collator(data.vocab), None, seed=0)
tokens = 0
for k in range(len(data.train) // 64):
    tokens += int(batches[k]["attention_mask"].sum())
print(json.dumps({"examples": len(data.train), "tokens": tokens}))
"""


def tree_anon_kb(pid: int) -> int:
    """RssAnon of a process and its descendants, in kB."""
    total, stack = 0, [pid]
    while stack:
        current = stack.pop()
        try:
            status = Path(f"/proc/{current}/status").read_text()
            total += int(next(line for line in status.splitlines() if line.startswith("RssAnon:")).split()[1])
            for task in Path(f"/proc/{current}/task").iterdir():
                stack += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError, StopIteration):
            continue
    return total


def peak_anon_mb(corpus: Path, cache: Path, layout: str) -> tuple[float, dict]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [sys.executable, "-c", READ_ALL, str(corpus), str(cache), layout]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    peak = 0
    while process.poll() is None:
        peak = max(peak, tree_anon_kb(process.pid))
        time.sleep(0.02)
    assert process.returncode == 0
    return peak / 1024, json.loads(process.stdout.read())


def corpus_of(path: Path, size: int) -> Path:
    articles = Path(resource_path("corpora/wikitext2/train.txt")).read_text(encoding="utf-8").split("\n\n")
    with open(path, "w", encoding="utf-8") as f:
        written, copy = 0, 0
        while written < size:
            for article in articles:
                text = f"{article}\nCopy {copy}.\n\n"
                f.write(text)
                written += len(text)
                if written >= size:
                    break
            copy += 1
    return path


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["streams", "full_sentences"])
def test_memory_is_flat_for_a_ten_times_larger_corpus(tmp_path, layout):
    small, small_counts = peak_anon_mb(corpus_of(tmp_path / "small.txt", 2_000_000), tmp_path / "c1", layout)
    large, large_counts = peak_anon_mb(corpus_of(tmp_path / "large.txt", 20_000_000), tmp_path / "c2", layout)
    assert large_counts["tokens"] > 9 * small_counts["tokens"]
    # Ten times the text: the same interpreter, torch and two worker processes, whose allocators settle between 55
    # and 75 MB each whatever the corpus; what grows with the corpus is a few bytes of index per document. Alone the
    # large corpus costs 8-16 MB more; beside a loaded test suite the workers' allocators once settled 82 MB higher,
    # so the bound is the one that tells a flat pipeline from one that holds the text: the pipeline before the store
    # took 1.95 GB for 100 MB of text, so 18 MB more would have cost 350 MB.
    assert large < small + 150, (small, large)
    print(f"{layout}: peak anonymous memory {small:.0f} MB for 2 MB, {large:.0f} MB for 20 MB")
