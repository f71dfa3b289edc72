"""plm-train on a weighted blend (data.sources): one validation loss per source beside the overall one in
metrics.jsonl and TensorBoard, realized shares within 1% of the weights, an exact resume, one store per source
reused by another blend, and the layouts a blend serves (GPT-2's windows, RoBERTa's full sentences, T5's spans,
BERT's sentence pairs) or refuses (Transformer-XL's streams)."""

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module

from plm_toolkit.commands.train import run
from plm_toolkit.config.validate import validate
from plm_toolkit.core.errors import ConfigError
from plm_toolkit.core.resources import resource_path
from tests.commands.test_train import launch
from tests.commands.test_train_t5 import T5
from tests.training.conftest import GPT2_SMALL, QUIET, read_metrics


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> dict[str, str]:
    """Two sources cut from the bundled WikiText excerpt, each with a validation file, and a cache."""
    root = tmp_path_factory.mktemp("blend")
    docs = Path(resource_path("corpora/wikitext2/train.txt")).read_text().split("\n\n")
    for name, part in (("a", docs[:12]), ("b", docs[12:20])):
        text = "\n\n".join(part)
        (root / f"{name}.txt").write_text(text[:24000])
        (root / f"{name}_dev.txt").write_text(text[-5000:])
    return {"root": str(root), "cache": str(tmp_path_factory.mktemp("cache"))}


def sources(corpora, weights=(0.75, 0.25), names=("a", "b")) -> str:
    root = corpora["root"]
    items = [
        f"{{name:{name},files:[{root}/{name}.txt],weight:{weight},validation_files:[{root}/{name}_dev.txt]}}"
        for name, weight in zip(names, weights, strict=True)
    ]
    return f"data.sources=[{','.join(items)}]"


def config(corpora, *overrides: str):
    base = ["data=text_files", f"data.cache_dir={corpora['cache']}", "data.num_proc=1", sources(corpora)]
    with initialize_config_module(config_module="plm_toolkit.configs", version_base="1.3"):
        return compose("train", overrides=[*QUIET, *base, *overrides])


def gpt(corpora, *overrides: str):
    return config(corpora, *GPT2_SMALL, "trainer.seed=3", *overrides)


@pytest.mark.slow
def test_gpt2_blend_logs_each_source_and_resumes_exactly(corpora, tmp_path):
    common = ["trainer.save_every=4", "optimizer.total_steps=8", "trainer.eval_every=4", "trainer.tensorboard=true"]
    run(gpt(corpora, *common, "trainer.max_steps=8"), tmp_path / "straight")
    run(gpt(corpora, *common, "trainer.max_steps=4"), tmp_path / "resumed")
    run(gpt(corpora, *common, "trainer.max_steps=8", "trainer.resume=auto"), tmp_path / "resumed")
    straight, resumed = read_metrics(tmp_path / "straight"), read_metrics(tmp_path / "resumed")
    assert [r["loss"] for r in straight if "lr" in r] == [r["loss"] for r in resumed if "lr" in r]
    evaluation = [r for r in straight if "eval_loss" in r][-1]
    assert evaluation == [r for r in resumed if "eval_loss" in r][-1]
    for name in ("a", "b"):
        assert evaluation[f"eval_loss/{name}"] > 0 and f"eval_clm_perplexity/{name}" in evaluation
    # The overall loss is the target-weighted mean of the sources' (their sums, scored once each).
    a, b = evaluation["eval_loss/a"], evaluation["eval_loss/b"]
    assert min(a, b) <= evaluation["eval_loss"] <= max(a, b)
    last = [r for r in straight if "lr" in r][-1]
    assert last["blend_share/a"] == pytest.approx(0.75, abs=0.01)
    assert last["blend_share/b"] == pytest.approx(0.25, abs=0.01)
    assert last["blend_epochs/a"] > 0
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(next((tmp_path / "straight").rglob("events.out.tfevents*")).parent)).Reload()
    assert {"eval_loss", "eval_loss/a", "eval_loss/b", "blend_share/a"} <= set(events.Tags()["scalars"])
    # Each source has its own store; another blend of the same sources tokenizes nothing again.
    stores = sorted(p.name for p in (Path(corpora["cache"]) / "stores").iterdir() if p.is_dir())
    assert len(stores) == 2  # the resumed run found its sources' stores through its checkpoint's tokenizer
    run(gpt(corpora, "trainer.max_steps=1", sources(corpora, (0.1, 0.9))), tmp_path / "other")
    assert sorted(p.name for p in (Path(corpora["cache"]) / "stores").iterdir() if p.is_dir()) == stores


@pytest.mark.parametrize(
    "family",
    [
        (
            "model=roberta_tiny",
            "model.max_position_embeddings=80",
            "data.max_seq_len=48",
            "data.tokenizer.vocab_size=500",
        ),
        ("model=bert_tiny", "objective=mlm_nsp", "data.max_seq_len=48", "data.tokenizer.vocab_size=500"),
        tuple(o for o in T5 if o not in QUIET),
    ],
    ids=["roberta_full_sentences", "bert_sentence_pairs", "t5_spans"],
)
def test_each_blended_layout_trains_and_scores_each_source(corpora, tmp_path, family):
    run(config(corpora, *family, "trainer.batch_size=4", "trainer.max_steps=2", "trainer.eval_every=2"), tmp_path)
    records = read_metrics(tmp_path)
    evaluation = [r for r in records if "eval_loss" in r][-1]
    assert {"eval_loss/a", "eval_loss/b"} <= set(evaluation)
    assert records[0]["blend_share/a"] == pytest.approx(0.75)  # 3 of every 4 rows


def test_stream_order_and_knowledge_units_are_refused(corpora):
    xl = config(corpora, "model=transformer_xl_tiny", "data.max_seq_len=32")
    with pytest.raises(ConfigError, match="data.sources: objective=clm reads one contiguous stream per batch row"):
        validate(xl)
    ernie = config(corpora, "model=ernie_tiny")
    with pytest.raises(ConfigError, match="data.sources: objective=.* masks knowledge units"):
        validate(ernie)


@pytest.mark.slow
def test_phases_blend_each_phase_and_albert_sop_reads_a_blend(corpora, tmp_path):
    phases = "trainer.phases=[{fraction:0.5,max_seq_len:24,batch_size:4},{fraction:0.5,max_seq_len:48,batch_size:2}]"
    bert = ("model=bert_tiny", "objective=mlm_sop", "data.tokenizer.vocab_size=500", "trainer.max_steps=4")
    run(config(corpora, *bert, phases, "trainer.eval_every=2"), tmp_path)
    records = read_metrics(tmp_path)
    train = [r for r in records if "lr" in r]
    # 4 rows of a 0.75/0.25 blend per step in phase 1, 2 rows in phase 2 (each phase read from its own start).
    assert [r["blend_share/a"] for r in train] == [0.75, 0.75, 0.5, 0.75]
    assert {"eval_loss/a", "eval_loss/b", "eval_sop_accuracy/b"} <= set([r for r in records if "eval_loss" in r][-1])


@pytest.mark.distributed
@pytest.mark.slow
def test_two_processes_read_the_blend_one_process_reads(corpora, tmp_path):
    """2 ranks x 4 rows against 1 process x 8 rows: the same blended examples, the same losses, the same
    per-source validation losses (each source's batches dealt out over the ranks, summed in lockstep)."""
    common = [
        *GPT2_SMALL, "model.hidden_dropout=0", "model.attention_dropout=0", "model.embedding_dropout=0",
        *QUIET, "data=text_files", f"data.cache_dir={corpora['cache']}", "data.num_proc=1", sources(corpora),
        "trainer.max_steps=4", "trainer.eval_every=4", "trainer.eval_batches=0", "data.tokenizer.kind=character",
    ]  # fmt: skip
    two = launch([*common, "trainer.batch_size=4", f"hydra.run.dir={tmp_path / 'two'}"], tmp_path, nproc=2)
    assert two.returncode == 0, two.stderr[-3000:]
    one = launch([*common, "trainer.batch_size=8", f"hydra.run.dir={tmp_path / 'one'}"], tmp_path)
    assert one.returncode == 0, one.stderr[-3000:]
    a, b = read_metrics(tmp_path / "one"), read_metrics(tmp_path / "two")
    for x, y in zip(a, b, strict=True):
        for key in ("loss", "eval_loss", "eval_loss/a", "eval_loss/b", "blend_share/a"):
            assert (key in x) == (key in y) and abs(x.get(key, 0) - y.get(key, 0)) < 1e-5, (key, x, y)


@pytest.mark.slow
def test_each_source_reads_with_its_own_text_column_and_document_boundary(corpora, tmp_path):
    rows = [{"content": f"def function_{k}(x):\n    return x * {k}\n"} for k in range(300)]
    (tmp_path / "code.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (tmp_path / "lines.txt").write_text("".join(f"Sentence {k} stands on its own line.\n" for k in range(400)))
    blend = (
        f"data.sources=[{{name:code,files:[{tmp_path}/code.jsonl],weight:2,text_column:content}},"
        f"{{name:lines,files:[{tmp_path}/lines.txt],weight:1,document_boundary:line}},"
        f"{{name:wiki,files:[{corpora['root']}/a.txt],weight:1}}]"
    )
    run(
        gpt(corpora, blend, "trainer.max_steps=2", "trainer.batch_size=8", f"data.cache_dir={tmp_path}/cache"), tmp_path
    )
    train = [r for r in read_metrics(tmp_path) if "lr" in r]
    assert (train[-1]["blend_share/code"], train[-1]["blend_share/lines"]) == (0.5, 0.25)
    stores = [json.loads(p.read_text()) for p in (tmp_path / "cache" / "stores").glob("*/manifest.json")]
    documents = sorted(m["splits"]["train"]["documents"] for m in stores)
    assert documents[-2:] == [300, 400]  # a document per JSONL row, a document per line
