"""The third round of bad inputs and faults, through the real command line: a token store whose bytes changed after
plm-prepare wrote them (a flipped byte, an id beyond the vocabulary, a missing index or manifest), a .zst corpus cut
short, settings that contradict a store (other training files, validation files it lacks, a file listed twice), a
store path that is a file. Each gets exit status 1 and one ``error:`` line naming the file or key and what to do
(test_bad_inputs.py's ``assert_one_error_line``). Besides: a vocabulary that came out smaller than asked because
its sample was says so in one line.

The store cases share one prepared store (copied per case); the cases run two at a time, once per session.
"""

# The table of cases reads best one case a line, as in test_bad_inputs.py.
# ruff: noqa: E501
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from plm_toolkit.data.store.token_store import Shard, write_index
from plm_toolkit.training.preemption import EXIT_REQUEUE
from tests.bad_inputs.test_bad_inputs import Case, assert_one_error_line, command_line, train_tiny_run
from tests.bad_inputs.test_bad_inputs_kbqa import BASE as KBQA_BASE
from tests.bad_inputs.test_bad_inputs_store import CORPUS, GPT
from tests.bad_inputs.test_bad_inputs_store_kinds import PAIRS

STORE = (*GPT, "data.train_files=[{tmp}/corpus.txt]", "data.store={tmp}/store")
DAMAGED = "the token store {tmp}/store is damaged; plm-prepare with the overrides that prepared it repairs it"


@dataclass(frozen=True)
class Round3Case:
    case: Case
    # What the case's folder holds before the command runs (see ``setup``).
    setup: str = "corpus"


CASES = [
    # --- the store trusts its bytes no more --------------------------------------------------------------------
    Round3Case(Case("store_flipped_bytes", "train", ("data.store={tmp}/store",), "token store shard {tmp}/store/train/00000.bin does not match the checksum its index records", base=GPT), "flipped"),
    Round3Case(Case("store_id_beyond_vocabulary", "train", ("data.store={tmp}/store",), "token store shard {tmp}/store/train/00001.bin holds token id 65000 at position 3, beyond the vocabulary of its tokenizer", base=GPT), "beyond_vocabulary"),
    # plm-prepare repairs these (test_bad_inputs_round4_data.py); plm-train refuses them, naming it.
    Round3Case(Case("store_index_missing", "train", ("data.store={tmp}/store",), "token store shard {tmp}/store/train/00000.idx is missing: " + DAMAGED, base=GPT), "index_missing"),
    Round3Case(Case("store_manifest_missing", "train", ("data.store={tmp}/store",), "{tmp}/store/manifest.json is missing: " + DAMAGED, base=GPT), "manifest_missing"),
    Round3Case(Case("store_tokenizer_replaced", "train", ("data.store={tmp}/store",), "{tmp}/store/tokenizer.json is not the tokenizer the store's ids come from", base=GPT), "tokenizer_replaced"),
    Round3Case(Case("zst_cut_in_a_later_frame", "prepare", (*GPT, "data.train_files=[{tmp}/corpus.txt.zst]", "data.store={tmp}/store"), "{tmp}/corpus.txt.zst: corrupt zstd data near compressed byte offset"), "zst_cut"),
    Round3Case(Case("zst_small_cut", "prepare", (*GPT, "data.train_files=[{tmp}/small.txt.zst]", "data.store={tmp}/store"), "{tmp}/small.txt.zst: corrupt zstd data near compressed byte offset"), "zst_cut"),
    # --- settings that contradict each other ------------------------------------------------------------------
    Round3Case(Case("store_and_other_train_files", "train", ("data.store={tmp}/store", "data.train_files=[{tmp}/other.txt]"), "data.train_files names {tmp}/other.txt, which data.store={tmp}/store was not prepared from", base=GPT), "store"),
    Round3Case(Case("store_without_validation_split", "train", ("data.store={tmp}/store", "data.validation_files=[{tmp}/other.txt]"), "data.validation_files=[{tmp}/other.txt]: data.store={tmp}/store has no validation split", base=GPT), "store"),
    Round3Case(Case("file_listed_twice", "prepare", (*GPT, "data.train_files=[{tmp}/corpus.txt,{tmp}/./corpus.txt]", "data.store={tmp}/store"), "data.train_files: {tmp}/./corpus.txt is listed twice")),
    Round3Case(Case("file_listed_twice_by_a_pattern", "train", ("data.train_files=[{tmp}/corpus.txt,{tmp}/*.txt]",), "data.train_files: {tmp}/corpus.txt is listed twice (by '{tmp}/corpus.txt' and '{tmp}/*.txt')", base=GPT)),
    # --- a tokenizer that does not belong to its weights; averages that would mix ------------------------------
    Round3Case(Case("finetune_bert_with_gpt2_tokenizer", "finetune", ("model.checkpoint={tmp}/gpt2_tokenizer",), "{tmp}/gpt2_tokenizer/tokenizer.json: wraps a text as 'A <|endoftext|>', with no [CLS] (or <s>) before it where model=bert reads a text's summary"), "gpt2_tokenizer"),
    Round3Case(Case("export_bert_with_gpt2_tokenizer", "export", ("{tmp}/gpt2_tokenizer", "{tmp}/hf"), "{tmp}/gpt2_tokenizer/tokenizer.json: wraps a text as 'A <|endoftext|>'"), "gpt2_tokenizer"),
    Round3Case(Case("embed_bert_with_gpt2_tokenizer", "embed", ("checkpoint={tmp}/gpt2_tokenizer", "input_file={tmp}/other.txt", "output_file={tmp}/out.hdf5"), "{tmp}/gpt2_tokenizer/tokenizer.json: wraps a text as 'A <|endoftext|>'"), "gpt2_tokenizer"),
    Round3Case(Case("finetune_hf_folder_with_gpt2_tokenizer", "finetune", ("model.checkpoint={tmp}/hf_gpt2_tokenizer",), "{tmp}/hf_gpt2_tokenizer/tokenizer.json: wraps a text as 'A <|endoftext|>'"), "gpt2_tokenizer"),
    Round3Case(Case("average_other_tokenizers", "average", ("{tmp}/run", "2", "{tmp}/averaged"), "{tmp}/run/checkpoints/step_1/tokenizer.json differs from {tmp}/run/checkpoints/step_2/tokenizer.json: checkpoints with different tokenizers cannot be averaged"), "average_tokenizers"),
    Round3Case(Case("average_without_heads", "average", ("{tmp}/run", "2", "{tmp}/averaged"), "{tmp}/run/checkpoints/step_1: has no objective.safetensors, which {tmp}/run/checkpoints/step_2 has"), "average_heads"),
    Round3Case(Case("pairs_listed_twice", "prepare", (*PAIRS, "data.train_files=[{tmp}/pairs.jsonl,{tmp}/pairs.jsonl]"), "data.train_files: {tmp}/pairs.jsonl is listed twice"), "pairs"),
    Round3Case(Case("dataset_path_and_train_files", "train", ("data.dataset_path={tmp}", "data.train_files=[{tmp}/corpus.txt]"), "data.dataset_path and data.train_files are both given; the saved dataset replaces the files, which would be ignored", base=GPT)),
    # --- messages that name the culprit -----------------------------------------------------------------------
    Round3Case(Case("kbqa_names_empty", "finetune", (*KBQA_BASE, "task.kb_names={tmp}/names.tsv"), "{tmp}/names.tsv: names no entity of the knowledge base (task.kb_names): it has no rows"), "empty_names"),
    Round3Case(Case("paper_recipe_on_plain_text", "train", (), "experiment=transformer_base_paper sets data.max_tokens, which the config chosen for data (DataConfig) has no key for: the recipe trains on sentence pairs and needs data=parallel", base=("experiment=transformer_base_paper", "data=text_files", "hardware=cpu"))),
    Round3Case(Case("weights_link_to_a_device_finetune", "finetune", ("model.checkpoint={tmp}/device_weights",), "{tmp}/device_weights/model.safetensors: not a regular file (a link to /dev/zero)"), "device_weights"),
    Round3Case(Case("weights_link_to_a_device_export", "export", ("{tmp}/device_weights", "{tmp}/hf"), "{tmp}/device_weights/model.safetensors: not a regular file (a link to /dev/zero)"), "device_weights"),
    Round3Case(Case("store_where_nothing_can_be_written", "prepare", (*GPT, "data.train_files=[{tmp}/corpus.txt]", "data.store=/sys/plm_toolkit_store"), "data.store=/sys/plm_toolkit_store: cannot write the token store there (Permission denied: /sys/.plm_toolkit_store.lock)")),
    Round3Case(Case("store_is_a_file", "prepare", (*GPT, "data.train_files=[{tmp}/corpus.txt]", "data.store={tmp}/corpus.txt"), "data.store={tmp}/corpus.txt is a file; expected a folder for the token store")),
]  # fmt: skip


def prepare(tmp: Path) -> None:
    command = command_line(Case("setup", "prepare", STORE, ""), {"tmp": str(tmp)})
    done = subprocess.run(command, cwd=tmp, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


def rewrite_shard(stem: Path, change) -> None:
    """Change a shard's ids with ``change(ids)`` (a writable array) and record their new checksum in its index, as a
    store written by a tool that checks nothing would look."""
    shard = Shard.open(stem)
    ids = np.array(shard.ids)
    change(ids)
    stem.with_suffix(".bin").write_bytes(ids.tobytes())
    arrays = {name: np.array(shard.array(name)) for name in shard.header["arrays"]}
    header = {k: v for k, v in shard.header.items() if k != "arrays"}
    write_index(stem.with_suffix(".idx"), {**header, "ids_crc32": zlib.crc32(ids.tobytes())}, arrays)


def gpt2_like_tokenizer(size: int) -> str:
    """A byte-level BPE of at most ``size`` tokens with GPT-2's one special token: GPT-2's kind of tokenizer.json."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())  # fmt: skip
    tokenizer.train_from_iterator(CORPUS.splitlines(), trainer=trainer)
    return tokenizer.to_str()


def setup_run(name: str, tmp: Path, run: Path) -> None:
    """Copies of the finished tiny BERT run (``run``) and of its checkpoint, each broken one way."""
    from plm_toolkit.interop.hf import export_hf
    from plm_toolkit.interop.pretrained import load_backbone

    step = run / "checkpoints" / "step_2"
    if name == "gpt2_tokenizer":
        rows = load_backbone(step).model.input_embeddings.num_embeddings
        shutil.copytree(step, tmp / "gpt2_tokenizer")
        (tmp / "gpt2_tokenizer" / "tokenizer.json").write_text(gpt2_like_tokenizer(rows))
        export_hf(tmp / "hf_gpt2_tokenizer", load_backbone(step).model, None, step / "tokenizer.json")
        (tmp / "hf_gpt2_tokenizer" / "tokenizer.json").write_text(gpt2_like_tokenizer(rows))
    if name == "device_weights":
        shutil.copytree(step, tmp / "device_weights")
        (tmp / "device_weights" / "model.safetensors").unlink()
        (tmp / "device_weights" / "model.safetensors").symlink_to("/dev/zero")
    if name == "empty_names":
        (tmp / "names.tsv").write_text("", encoding="utf-8")
    if name.startswith("average"):
        shutil.copytree(run, tmp / "run", symlinks=True)
        older = tmp / "run" / "checkpoints" / "step_1"
        shutil.copytree(step, older)
        if name == "average_tokenizers":
            tokenizer = json.loads((older / "tokenizer.json").read_text())
            vocab = tokenizer["model"]["vocab"]
            first, second = sorted(vocab, key=vocab.get)[-2:]
            vocab[first], vocab[second] = vocab[second], vocab[first]
            (older / "tokenizer.json").write_text(json.dumps(tokenizer))
        else:
            (older / "objective.safetensors").unlink()


def setup(name: str, tmp: Path, store: Path) -> None:
    (tmp / "corpus.txt").write_text(CORPUS, encoding="utf-8")
    (tmp / "other.txt").write_text("Another document.\n", encoding="utf-8")
    if name in ("store", "flipped", "beyond_vocabulary", "index_missing", "manifest_missing", "tokenizer_replaced"):
        shutil.copytree(store / "store", tmp / "store")
        manifest = json.loads((tmp / "store" / "manifest.json").read_text())  # the copy's sources are this folder's
        for row in manifest["splits"]["train"]["sources"]:
            row["path"] = str(tmp / "corpus.txt")
            row["size"], row["mtime_ns"] = os.stat(tmp / "corpus.txt").st_size, os.stat(tmp / "corpus.txt").st_mtime_ns
        (tmp / "store" / "manifest.json").write_text(json.dumps(manifest))
    shard = tmp / "store" / "train" / "00000.bin"
    if name == "flipped":  # sizes unchanged, a few bytes flipped
        data = bytearray(shard.read_bytes())
        data[10:14] = bytes(b ^ 0x01 for b in data[10:14])
        shard.write_bytes(bytes(data))
    if name == "beyond_vocabulary":
        rewrite_shard(tmp / "store" / "train" / "00001", lambda ids: ids.__setitem__(3, 65000))
    if name == "index_missing":
        shard.with_suffix(".idx").unlink()
    if name == "manifest_missing":
        (tmp / "store" / "manifest.json").unlink()
    if name == "tokenizer_replaced":
        tokenizer = json.loads((tmp / "store" / "tokenizer.json").read_text())
        tokenizer["added_tokens"] = tokenizer["added_tokens"][:-1]
        (tmp / "store" / "tokenizer.json").write_text(json.dumps(tokenizer))
    if name == "pairs":
        rows = [{"en": f"Document {k} starts.", "de": f"Dokument {k} beginnt."} for k in range(50)]
        (tmp / "pairs.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    if name == "zst_cut":
        zstandard = pytest.importorskip("zstandard")
        frames = b"".join(zstandard.ZstdCompressor().compress(CORPUS[k::4].encode()) for k in range(4))
        (tmp / "corpus.txt.zst").write_bytes(frames[: len(frames) * 3 // 4])  # cut inside the third or fourth frame
        small = zstandard.ZstdCompressor().compress(b"A small corpus of one document.\n" * 40)
        (tmp / "small.txt.zst").write_bytes(small[: len(small) - 8])


@pytest.fixture(scope="session")
def finished(tmp_path_factory) -> Path:
    """A folder with a finished 2-step run of a tiny BERT (``run``) and a prepared store (``prepared/store``)."""
    root = tmp_path_factory.mktemp("bad_inputs_round3")
    train_tiny_run(root)
    (root / "prepared").mkdir()
    (root / "prepared" / "corpus.txt").write_text(CORPUS, encoding="utf-8")
    prepare(root / "prepared")
    return root


@pytest.fixture(scope="session")
def outcomes(finished) -> dict[str, dict]:
    root = finished
    env = {**os.environ, "TQDM_DISABLE": "1"}
    env.pop("HYDRA_FULL_ERROR", None)

    def one(round3: Round3Case) -> tuple[str, dict]:
        case = round3.case
        tmp = root / case.name
        tmp.mkdir()
        setup(round3.setup, tmp, root / "prepared")
        setup_run(round3.setup, tmp, root / "run")
        places = {"tmp": str(tmp), "run": str(tmp / "run"), "checkpoint": str(root / "run" / "checkpoints" / "step_2")}
        done = subprocess.run(command_line(case, places), cwd=tmp, env=env, capture_output=True, text=True, timeout=300)
        return case.name, {"done": done, "places": places, "tmp": tmp}

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(one, CASES))


@pytest.mark.slow
@pytest.mark.parametrize("round3", CASES, ids=[c.case.name for c in CASES])
def test_bad_input_round3_gets_one_line(round3, outcomes):
    assert_one_error_line(round3.case, outcomes[round3.case.name])


def quiet_env() -> dict:
    env = {**os.environ, "TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("HYDRA_FULL_ERROR", None)
    return env


@pytest.mark.slow
def test_last_is_the_newest_complete_step_for_export_and_resume(finished, tmp_path):
    """A ``last`` left on an older step while a newer complete one exists: plm-export exports the newest (as
    trainer.resume=auto resumes it) and names the stale link in one line; a ``last`` into another run, the same."""
    run = tmp_path / "run"
    shutil.copytree(finished / "run", run, symlinks=True)
    shutil.copytree(run / "checkpoints" / "step_2", run / "checkpoints" / "step_3")  # newer, complete; last -> step_2
    places = {"tmp": str(tmp_path)}
    done = subprocess.run(command_line(Case("x", "export", (str(run), "{tmp}/hf"), ""), places), cwd=tmp_path,
                          env=quiet_env(), capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((tmp_path / "hf" / "exported.json").read_text())["checkpoint"] == str(
        run / "checkpoints" / "step_3"
    )
    assert f"{run}/checkpoints/last points to step_2, not to the run's newest complete checkpoint" in done.stderr

    other = tmp_path / "other"  # a run whose last links into the first run
    (other / "checkpoints").mkdir(parents=True)
    shutil.copytree(finished / "run" / "checkpoints" / "step_2", other / "checkpoints" / "step_1")
    (other / "checkpoints" / "last").symlink_to(run / "checkpoints" / "step_3")
    done = subprocess.run(command_line(Case("x", "export", (f"{other}/checkpoints/last", "{tmp}/hf2"), ""), places),
                          cwd=tmp_path, env=quiet_env(), capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    exported = json.loads((tmp_path / "hf2" / "exported.json").read_text())["checkpoint"]
    assert exported == str(other / "checkpoints" / "step_1")


@pytest.mark.slow
def test_sighup_saves_the_step_and_says_how_to_resume(finished, tmp_path):
    """A closed terminal (SIGHUP) during training saves a checkpoint and exits with the requeue status and one
    line, as SIGTERM does, instead of dying with 129 and losing the steps since the last save."""
    run = tmp_path / "run"
    case = Case("x", "train", ("trainer.max_steps=400", "trainer.save_every=0"), "")
    places = {"run": str(run), "corpus": str(finished / "corpus.txt"), "cache": str(finished / "cache")}
    process = subprocess.Popen(command_line(case, places), cwd=tmp_path, env=quiet_env(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and process.poll() is None:
        metrics = run / "metrics.jsonl"
        if metrics.is_file() and len(metrics.read_text().splitlines()) >= 3:
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGHUP)
    stdout, stderr = process.communicate(timeout=240)
    assert process.returncode == EXIT_REQUEUE, stderr[-3000:]
    assert "received SIGHUP" in stdout + stderr and "rerun the same command to resume" in stdout + stderr
    steps = [p.name for p in (run / "checkpoints").glob("step_*")]
    assert len(steps) == 1 and 3 <= int(steps[0][5:]) < 400


@pytest.mark.slow
def test_a_vocabulary_smaller_than_asked_for_its_sample_says_so(tmp_path):
    (tmp_path / "corpus.txt").write_text(CORPUS * 3, encoding="utf-8")
    args = (*STORE, "data.tokenizer.kind=wordpiece", "data.tokenizer.vocab_size=600",
            "data.tokenizer.train_sample_bytes=3000")  # fmt: skip
    done = subprocess.run(command_line(Case("x", "prepare", args, ""), {"tmp": str(tmp_path)}), cwd=tmp_path,
                          env=quiet_env(), capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    learned = json.loads(done.stdout.splitlines()[-1])["vocab_size"]
    assert learned < 600
    assert (
        f"data.tokenizer.vocab_size=600: the vocabulary learned only {learned} tokens from its sample of 3000 bytes"
        in done.stdout + done.stderr
    )


@pytest.mark.slow
def test_sigterm_stops_plm_prepare_in_one_line_and_leaves_no_lock(tmp_path):
    """SIGTERM to plm-prepare with worker processes: one line, the status a shell gives SIGTERM, no worker
    traceback, no lock or half-written shard left; the same command then finishes the store from its shards."""
    words = [f"w{k}x" for k in range(3000)]
    documents = (" ".join(words[(d * 7 + i * 13) % 3000] for i in range(80)) + ".\n\n" for d in range(30000))
    (tmp_path / "corpus.txt").write_text("".join(documents), encoding="utf-8")
    args = (*STORE, "data.num_proc=2", "data.shard_bytes=400000")
    command = command_line(Case("x", "prepare", args, ""), {"tmp": str(tmp_path)})
    process = subprocess.Popen(command, cwd=tmp_path, env=quiet_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and process.poll() is None and not list(tmp_path.glob("store/train/*.idx")):
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=240)
    assert process.returncode == 128 + signal.SIGTERM, stderr[-3000:]
    assert stderr.splitlines() == [
        "error: stopped by SIGTERM: the token store's finished shards are kept; rerun the same command to resume"
    ]
    left = [p.name for p in tmp_path.rglob(".*")]
    assert left == [], f"left behind: {left}"
    again = subprocess.run(command, cwd=tmp_path, env=quiet_env(), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert (tmp_path / "store" / "manifest.json").is_file()


@pytest.mark.slow
def test_a_byte_order_mark_is_not_a_token(tmp_path):
    """A corpus saved with a byte-order mark (Windows editors): the mark is dropped as the task readers drop it, not
    learned as a character and put at the front of the first document."""
    (tmp_path / "corpus.txt").write_text("\ufeff" + CORPUS, encoding="utf-8")
    (tmp_path / "rows.jsonl").write_text("\ufeff" + json.dumps({"text": CORPUS}) + "\n", encoding="utf-8")
    for name, store in (("corpus.txt", "store"), ("rows.jsonl", "rows_store")):
        args = (*GPT, f"data.train_files=[{{tmp}}/{name}]", f"data.store={{tmp}}/{store}")
        done = subprocess.run(command_line(Case("x", "prepare", args, ""), {"tmp": str(tmp_path)}), cwd=tmp_path,
                              env=quiet_env(), capture_output=True, text=True, timeout=300)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(tmp_path / store / "tokenizer.json"))
        assert "\ufeff" not in tokenizer.get_vocab()
        first = Shard.open(tmp_path / store / "train" / "00000").ids[:8].tolist()
        assert tokenizer.decode(first).replace(" ", "") == "Document"


def peak_prepare_mb(tmp: Path, corpus: Path, store: str) -> tuple[float, dict]:
    """plm-prepare's peak anonymous memory (with its workers) and its summary, for ``corpus`` into ``store``."""
    from tests.data.store.test_store_memory import tree_anon_kb

    args = ("model=gpt2_tiny", "data=text_files", f"data.train_files=[{corpus}]", f"data.store={tmp}/{store}",
            "data.num_proc=1", "data.tokenizer.vocab_size=500", "data.tokenizer.train_sample_bytes=300000",
            f"data.cache_dir={tmp}/cache", "hardware=cpu")  # fmt: skip
    command = command_line(Case("x", "prepare", args, ""), {})
    process = subprocess.Popen(command, cwd=tmp, env=quiet_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    peak = 0
    while process.poll() is None:
        peak = max(peak, tree_anon_kb(process.pid))
        time.sleep(0.02)
    stdout, stderr = process.communicate()
    assert process.returncode == 0, stderr.decode()[-3000:]
    return peak / 1024, json.loads(stdout.decode().splitlines()[-1])


@pytest.mark.slow
def test_one_long_line_takes_the_memory_of_short_documents(tmp_path):
    """A corpus that is one 6 MB line (minified JSON, a book without newlines) is tokenized in bounded pieces cut
    between words: its preparation peaks near the same words written as short documents (a whole-line encoding
    took about 150 bytes a character: 2,073 MB against 393 MB for a 23 MB line), with the same tokens."""
    words = [f"w{k % 997}x{k % 13}" for k in range(800_000)]
    (tmp_path / "line.txt").write_text(" ".join(words) + "\n", encoding="utf-8")
    documents = "\n\n".join(" ".join(words[k : k + 400]) for k in range(0, len(words), 400))
    (tmp_path / "documents.txt").write_text(documents + "\n", encoding="utf-8")
    short, _ = peak_prepare_mb(tmp_path, tmp_path / "documents.txt", "documents_store")
    long, summary = peak_prepare_mb(tmp_path, tmp_path / "line.txt", "line_store")
    assert summary["splits"]["train"]["documents"] == 1
    # Measured on a 2-core machine: 493 MB against 374 MB (the whole line encoded at once: 1,844 MB).
    assert long < short + 200, (short, long)
    ids = Shard.open(tmp_path / "line_store" / "train" / "00000").ids
    from tokenizers import Tokenizer

    from plm_toolkit.data.tokenization.pipelines import running_text_tokenizer

    tokenizer = running_text_tokenizer(Tokenizer.from_file(str(tmp_path / "line_store" / "tokenizer.json")))
    line = (tmp_path / "line.txt").read_text(encoding="utf-8").rstrip("\n")  # the document, as the store holds it
    whole = tokenizer.encode(line, add_special_tokens=False).ids
    assert ids.tolist() == whole  # cut between words: the tokens of the line as one text
