"""plm-finetune on tiny Transformer and T5 checkpoints: task=translation, task=seq2seq and the text-to-text form of
SST-2 train, decode and score; tasks a backbone cannot serve are refused with the family named."""

import json

import pytest
from omegaconf import OmegaConf

from plm_toolkit.commands.finetune import run
from plm_toolkit.core.errors import ConfigError
from tests.commands.test_finetune import falls, losses
from tests.tasks.conftest import SST2_DEV, SST2_TRAIN
from tests.training.conftest import read_metrics

pytest.importorskip("sacrebleu")
FAST = ["optimizer.lr=3e-3", "optimizer.warmup_ratio=0", "trainer.batch_size=16", "data.max_seq_len=40"]


@pytest.fixture
def config_for(finetune_config, transformer_checkpoint):
    return lambda *overrides: finetune_config(f"model.checkpoint={transformer_checkpoint}", *overrides)


@pytest.fixture
def en_de_slice(tmp_path, shared_data):
    for lang in ("en", "de"):
        lines = (shared_data / "translation" / "en-de" / f"train.{lang}").read_text(encoding="utf-8").splitlines()
        (tmp_path / f"train.{lang}").write_text("\n".join(lines[:400]) + "\n", encoding="utf-8")
    dev = (shared_data / "translation" / "en-de" / "dev.jsonl").read_text(encoding="utf-8").splitlines()
    (tmp_path / "dev.jsonl").write_text("\n".join(dev[:24]) + "\n", encoding="utf-8")
    return tmp_path


@pytest.mark.slow
def test_translation_task_trains_and_scores_bleu(config_for, en_de_slice, tmp_path):
    run_dir = tmp_path / "run"
    cfg = config_for(
        "task=translation",
        f"data.train_file={en_de_slice / 'train'}",
        f"data.validation_file={en_de_slice / 'dev.jsonl'}",
        *FAST,
        "task.num_beams=2",
        "task.max_length_b=6",
        "trainer.max_steps=30",
    )
    final = run(cfg, run_dir)
    ok, detail = falls(losses(run_dir), 0.5)
    assert ok, detail
    results = json.loads((run_dir / "eval_results.json").read_text())
    assert {"bleu", "chrf", "bleu_signature", "chrf_signature"} == set(results)
    assert final["eval_bleu"] == results["bleu"] and 0.0 <= results["chrf"] <= 100.0
    assert len(json.loads((run_dir / "predictions.json").read_text())) == 24


@pytest.mark.slow
def test_seq2seq_task_reads_named_columns(config_for, tmp_path):
    rows = [{"question": f"say {w}", "answer": w} for w in ["yes", "no", "maybe", "good", "bad", "red"] * 8]
    path = tmp_path / "qa.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run_dir = tmp_path / "run"
    cfg = config_for(
        "task=seq2seq",
        "task.source_column=question",
        "task.target_column=answer",
        "task.source_prefix=question: ",
        f"data.train_file={path}",
        f"data.validation_file={path}",
        *FAST,
        "task.num_beams=1",
        "task.max_length_b=4",
        "trainer.max_steps=60",
        # One-word answers: BLEU (the task's main metric) is 0 at every evaluation, so the best is chosen by the
        # metric this test checks.
        "trainer.metric_for_best_model=exact_match",
    )
    run(cfg, run_dir)
    ok, detail = falls(losses(run_dir), 1.0)
    assert ok, detail
    results = json.loads((run_dir / "eval_results.json").read_text())
    assert {"bleu", "chrf", "exact_match"} <= set(results)
    assert results["exact_match"] > 0.5
    records = [r for r in read_metrics(run_dir) if "eval_exact_match" in r]
    assert records and records[-1]["eval_exact_match"] == results["exact_match"]


@pytest.mark.slow
@pytest.mark.parametrize("family", ["transformer", "t5"])
def test_sst2_on_an_encoder_decoder_generates_label_words(finetune_config, request, tmp_path, family):
    """The GLUE preset's T5 template ("sst2 sentence: ...") and label words, through the same task code for both
    families: the loss falls and the model answers with label words only."""
    checkpoint = request.getfixturevalue(f"{family}_checkpoint")
    run_dir = tmp_path / "run"
    cfg = finetune_config(
        f"model.checkpoint={checkpoint}",
        "task=sst2",
        f"data.train_file={SST2_TRAIN}",
        f"data.validation_file={SST2_DEV}",
        "data.max_train_samples=256",
        "data.max_eval_samples=64",
        *FAST,
        "trainer.max_steps=40",
    )
    run(cfg, run_dir)
    ok, detail = falls(losses(run_dir), 0.5)
    assert ok, detail
    results = json.loads((run_dir / "eval_results.json").read_text())
    assert set(results) == {"accuracy", "invalid_outputs"}
    assert results["invalid_outputs"] == 0  # it learned to answer with a label word
    predictions = json.loads((run_dir / "predictions.json").read_text())
    assert len(predictions) == 64 and set(predictions.values()) <= {"0", "1"}
    saved = OmegaConf.load(run_dir / "checkpoints" / "last" / "config.yaml")
    assert saved.backbone.name == family and saved.task.input_template.startswith("sst2 sentence:")


def test_inputs_beyond_the_position_table_are_cut_with_a_warning(config_for, tmp_path, caplog):
    (tmp_path / "t.en").write_text("a b c\n" * 4)
    (tmp_path / "t.de").write_text("x y z\n" * 4)
    cfg = config_for(
        "task=translation",
        f"data.train_file={tmp_path / 't'}",
        "data.max_seq_len=200",
        "trainer.max_steps=1",
        "trainer.batch_size=4",
    )
    with caplog.at_level("WARNING", logger="plm_toolkit"):
        run(cfg, tmp_path / "run")
    assert "data.max_seq_len=200 exceeds the 128 positions of the backbone" in caplog.text
    assert "inputs are cut to 128 tokens" in caplog.text


def test_tasks_the_backbone_cannot_serve_are_refused(config_for, finetune_config, tmp_path):
    (tmp_path / "train.conll").write_text("a O\n")
    with pytest.raises(ConfigError, match="task=ner puts a head on an encoder's token states; .*transformer"):
        run(
            config_for("task=ner", f"data.train_file={tmp_path / 'train.conll'}", "trainer.max_steps=1"), tmp_path / "a"
        )
    (tmp_path / "t.en").write_text("a\n")
    (tmp_path / "t.de").write_text("b\n")
    with pytest.raises(ConfigError, match="task=translation generates text and needs an encoder-decoder .*bert"):
        run(
            finetune_config("task=translation", f"data.train_file={tmp_path / 't'}", "trainer.max_steps=1"),
            tmp_path / "b",
        )
    with pytest.raises(ConfigError, match="task.num_beams=0"):
        run(
            config_for(
                "task=translation", f"data.train_file={tmp_path / 't'}", "task.num_beams=0", "trainer.max_steps=1"
            ),
            tmp_path / "c",
        )
