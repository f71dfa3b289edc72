"""plm-generate and plm-export on a trained model=gpt2 checkpoint: JSONL output, greedy = argmax, seeded sampling,
refusals of bad input (their command-line form is in tests/bad_inputs), and an export that transformers'
GPT2LMHeadModel loads with the same logits."""

import json

import pytest
import torch
import torch.nn.functional as F

from plm_toolkit.commands.export import export_checkpoint
from plm_toolkit.commands.generate import run as generate
from plm_toolkit.core.errors import ConfigError, DataError
from plm_toolkit.interop.pretrained import load_language_model
from tests.training.conftest import generate_config


@pytest.mark.slow
def test_plm_generate_writes_jsonl_and_greedy_is_the_argmax(gpt_run, tmp_path):
    checkpoint = gpt_run / "checkpoints" / "last"
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("The history of\n\nIn 1990 the\n")
    out = tmp_path / "out.jsonl"
    generate(generate_config(f"checkpoint={checkpoint}", f"prompts_file={prompts}", f"output_file={out}"))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["prompt"] for r in rows] == ["The history of", "In 1990 the"]
    assert all(set(r) == {"prompt", "prompt_ids", "text", "token_ids"} and r["token_ids"] for r in rows)
    # Greedy: each generated token is the argmax after the prompt and the tokens before it (left padding and the
    # cache change nothing).
    lm = load_language_model(checkpoint)
    for row in rows:
        ids = torch.tensor([row["prompt_ids"] + row["token_ids"]])
        with torch.no_grad():
            scores = lm.head(lm.model(ids).hidden[0])
        assert scores[len(row["prompt_ids"]) - 1 : -1].argmax(-1).tolist() == row["token_ids"]
        assert row["text"] == lm.tokenizer.decode(row["token_ids"])

    sampled = [
        generate(generate_config(f"checkpoint={checkpoint}", "prompt=The", "do_sample=true", "top_p=0.9", f"seed={s}"))
        for s in (1, 1, 2)
    ]
    assert sampled[0] == sampled[1] and sampled[0] != sampled[2]
    beams = generate(generate_config(f"checkpoint={checkpoint}", "prompt=The", "num_beams=3", "length_penalty=0.6"))
    assert beams[0]["token_ids"]


@pytest.mark.slow
def test_plm_generate_refuses_bad_input(gpt_run):
    checkpoint = gpt_run / "checkpoints" / "last"
    with pytest.raises(ConfigError, match=r"top_p=1.5: expected a probability in \(0, 1\]"):
        generate(generate_config(f"checkpoint={checkpoint}", "prompt=a", "top_p=1.5"))
    with pytest.raises(DataError, match=r"^prompt: \d+ tokens, with max_new_tokens=10 \d+ positions, more than .* 64"):
        generate(generate_config(f"checkpoint={checkpoint}", f"prompt='{'word ' * 60}'", "max_new_tokens=10",
                                 "slide_context=false"))  # fmt: skip


@pytest.mark.slow
def test_plm_generate_past_the_position_table_slides_the_context_and_says_so(gpt_run, caplog):
    """A prompt of 60 words and 30 new tokens on a 64-position GPT-2: every new token is the argmax of the model
    over the last 64 tokens (nanoGPT's crop), and the log says the context slides."""
    checkpoint = gpt_run / "checkpoints" / "last"
    with caplog.at_level("INFO", logger="plm_toolkit"):
        row = generate(generate_config(f"checkpoint={checkpoint}", f"prompt='{'word ' * 60}'", "max_new_tokens=30",
                                       "stop_at_eos=false"))[0]  # fmt: skip
    assert len(row["token_ids"]) == 30 and len(row["prompt_ids"]) + 30 > 64
    assert "more than the model's 64 (max_position_embeddings): the context slides" in caplog.text
    lm = load_language_model(checkpoint)
    tokens = list(row["prompt_ids"])
    with torch.no_grad():
        for _ in range(30):
            tokens.append(int(lm.head(lm.model(torch.tensor([tokens[-64:]])).hidden[0, -1]).argmax()))
    assert tokens[len(row["prompt_ids"]) :] == row["token_ids"]


def test_plm_generate_refuses_a_bidirectional_checkpoint(tmp_path):
    from tests.tasks.conftest import save_tiny_checkpoint, tiny_tokenizer

    checkpoint = save_tiny_checkpoint(tmp_path, tiny_tokenizer(["the cat sat on the mat"] * 20, vocab_size=60))
    with pytest.raises(ConfigError, match="model=bert is bidirectional: it cannot generate text"):
        generate(generate_config(f"checkpoint={checkpoint}", "prompt=a"))


@pytest.mark.slow
def test_plm_export_writes_what_gpt2_lm_head_model_loads(gpt_run, tmp_path):
    transformers = pytest.importorskip("transformers")
    export_checkpoint(gpt_run, tmp_path / "hf")
    reference = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "hf").eval()
    lm = load_language_model(gpt_run)
    ids = torch.randint(0, 600, (2, 20))
    with torch.no_grad():
        ours = lm.head(lm.model(ids).hidden)
        theirs = reference(input_ids=ids).logits
    assert (ours - theirs).abs().max().item() <= 1e-5
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["architectures"] == ["GPT2LMHeadModel"]
    text = "The history of the city, in 1990."  # as plm-generate encodes a prompt: no <|endoftext|> after it
    prompt = lm.tokenizer.encode(text, add_special_tokens=False).ids
    assert transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")(text).input_ids == prompt
    again = load_language_model(tmp_path / "hf")  # the exported folder is itself a checkpoint plm-generate reads
    with torch.no_grad():
        assert torch.allclose(again.head(again.model(ids).hidden), ours, atol=1e-6)
    hidden = torch.randn(2, 36)
    assert torch.equal(lm.head(hidden), F.linear(hidden, lm.model.input_embeddings.weight))  # tied, no bias
