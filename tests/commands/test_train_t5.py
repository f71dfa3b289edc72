"""End-to-end T5 span-corruption runs: 60 steps through the command line lower the loss, and the checkpoint then
decodes with plm-generate, averages with plm-average and exports with plm-export (transformers loads the folder with
the same logits and tokenizer); resume is exact; bad combinations are refused."""

import json
import math
import os
import subprocess
import sys

import pytest
import torch
from omegaconf import OmegaConf

from plm_toolkit.commands.train import run
from plm_toolkit.core.errors import ConfigError, DataError
from plm_toolkit.interop.pretrained import load_language_model
from tests.training.conftest import QUIET, read_metrics, train_records

# A tiny T5 with odd sizes; 300 tokens of vocabulary (100 of them sentinels).
T5 = [
    "model=t5_tiny",
    "objective=span_corruption",
    "model.hidden_size=36",
    "model.num_heads=3",
    "model.head_size=11",
    "model.intermediate_size=37",
    "model.num_decoder_layers=3",
    "data.max_seq_len=40",
    "data.tokenizer.vocab_size=300",
    "trainer.batch_size=8",
    *QUIET,
    "optimizer.lr=3e-3",
]


def command(module: str, *args: str, cwd) -> subprocess.CompletedProcess:
    """``python -m plm_toolkit.<module> ARGS``, as the plm-* entry points run it; fails the test on a non-zero exit."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", f"plm_toolkit.commands.{module}", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.mark.slow
def test_sixty_steps_through_the_command_line_then_generate_average_and_export(small_corpus, tmp_path):
    run_dir = tmp_path / "run"
    data = ["data=text_files", f"data.train_files=[{small_corpus['train']}]"]
    data += [f"data.validation_files=[{small_corpus['valid']}]", f"data.cache_dir={small_corpus['cache']}"]
    steps = ["trainer.max_steps=60", "trainer.eval_every=20", "trainer.eval_batches=4", "trainer.save_every=20"]
    command("train", *T5, *data, *steps, f"hydra.run.dir={run_dir}", cwd=tmp_path)
    records = read_metrics(run_dir)
    train = [r for r in records if "lr" in r]
    first, last = sum(r["loss"] for r in train[:5]) / 5, sum(r["loss"] for r in train[-10:]) / 10
    assert last < first - 1.0, (first, last)
    saved = OmegaConf.load(run_dir / "checkpoints" / "last" / "config.yaml")
    assert saved.data.tokenizer.kind == "t5_unigram" and saved.model.vocab_size == 300
    # Evaluation decodes the same corrupted validation windows each time: well below the uniform ln(V) at the end.
    evals = [r for r in records if "eval_loss" in r]
    losses = [r["eval_span_corruption_loss"] for r in evals]
    assert len(losses) == 3 and losses[-1] < losses[0] and losses[-1] < math.log(300) - 1.0, losses
    assert evals[-1]["eval_span_corruption_perplexity"] == pytest.approx(math.exp(losses[-1]), rel=1e-6)

    checkpoint = run_dir / "checkpoints" / "last"
    rows = check_generate(checkpoint, tmp_path)
    command("average", str(run_dir), "2", str(tmp_path / "averaged"), cwd=tmp_path)
    assert json.loads((tmp_path / "averaged" / "averaged.json").read_text())["steps"] == [40, 60]
    averaged = check_generate(tmp_path / "averaged", tmp_path)
    assert [r["prompt_ids"] for r in averaged] == [r["prompt_ids"] for r in rows]
    check_export(checkpoint, rows, tmp_path)


def check_generate(checkpoint, tmp_path) -> list[dict]:
    """plm-generate decodes greedily (each token the argmax given the ones before) and with beams; a trained T5
    answers a prompt with a sentinel by <extra_id_0> first."""
    prompts, out = tmp_path / "prompts.txt", tmp_path / "out.jsonl"
    prompts.write_text("The <extra_id_0> of the\nIn the <extra_id_0> , the <extra_id_1> was\n")
    command("generate", f"checkpoint={checkpoint}", f"prompts_file={prompts}", "max_new_tokens=6",
            f"output_file={out}", cwd=tmp_path)  # fmt: skip
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    lm = load_language_model(checkpoint)
    for row in rows:
        source, tokens = torch.tensor([row["prompt_ids"]]), row["token_ids"]
        assert tokens[0] == lm.model.config.vocab_size - 1, tokens
        decoder_input = torch.tensor([[lm.model.decoder_start_token_id, *tokens[:-1]]])
        with torch.no_grad():
            scores = lm.head(lm.model(source, torch.ones_like(source), decoder_input).hidden[0])
        assert scores.argmax(-1).tolist() == tokens
    beams = command("generate", f"checkpoint={checkpoint}", "prompt='The <extra_id_0>'", "num_beams=3", cwd=tmp_path)
    assert beams.stdout.strip().startswith("<extra_id_0>"), beams.stdout
    return rows


def check_export(checkpoint, rows: list[dict], tmp_path) -> None:
    """plm-export writes a folder that T5ForConditionalGeneration loads with our logits (<= 1e-5 in fp32) and whose
    tokenizer transformers' AutoTokenizer loads offline, tokenizing as the run did."""
    transformers = pytest.importorskip("transformers")
    command("export", str(checkpoint), str(tmp_path / "hf"), cwd=tmp_path)
    reference = transformers.T5ForConditionalGeneration.from_pretrained(tmp_path / "hf").eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert tokenizer(["The <extra_id_0> of the"]).input_ids[0] == rows[0]["prompt_ids"]
    lm = load_language_model(checkpoint)
    for row in rows:
        source = torch.tensor([row["prompt_ids"]])
        decoder_input = torch.tensor([[0, *row["token_ids"]]])
        with torch.no_grad():
            theirs = reference(input_ids=source, decoder_input_ids=decoder_input).logits[0]
            ours = lm.model.logits(lm.model(source, None, decoder_input).hidden)[0]
        assert (theirs - ours).abs().max() <= 1e-5
        assert tokenizer.decode(row["token_ids"]) == lm.tokenizer.decode(row["token_ids"], skip_special_tokens=False)


@pytest.mark.slow
def test_resume_continues_exactly(make_config, tmp_path):
    common = [*T5, "trainer.save_every=4", "optimizer.total_steps=8", "trainer.grad_accum_steps=2", "model.dropout=0.1"]
    straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"
    run(make_config(*common, "trainer.max_steps=8", tiny=False), straight)
    run(make_config(*common, "trainer.max_steps=4", tiny=False), interrupted)
    run(make_config(*common, "trainer.max_steps=8", "trainer.resume=auto", tiny=False), interrupted)
    a, b = train_records(straight), train_records(interrupted)
    assert [r["step"] for r in b] == list(range(1, 9))
    assert [r["loss"] for r in a] == [r["loss"] for r in b]
    from safetensors.torch import load_file

    wa = load_file(straight / "checkpoints" / "last" / "model.safetensors")
    wb = load_file(interrupted / "checkpoints" / "last" / "model.safetensors")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def test_span_corruption_on_an_encoder_only_model_names_the_capability(make_config, tmp_path):
    with pytest.raises(ConfigError, match="objective=span_corruption needs a model that is encoder_decoder; "):
        run(make_config("objective=span_corruption"), tmp_path)


def test_a_vocabulary_without_sentinels_is_refused(make_config, tmp_path):
    # T5 over RoBERTa's byte-level BPE: it has </s> and <pad>, but no <extra_id_N>.
    with pytest.raises(DataError, match=r"has no sentinel tokens \(<extra_id_0>, <extra_id_1>, ...\)"):
        run(make_config(*T5, "data.tokenizer.kind=bpe", "trainer.max_steps=1", tiny=False), tmp_path)
