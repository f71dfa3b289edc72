"""plm-generate on encoder-decoder checkpoints (T5, the Transformer): the prompt goes to the encoder (followed by
the end token, right-padded and masked when prompts of different lengths share a batch), the decoder starts from
its start token; greedy and beam search equal transformers' ``generate`` on T5 and the teacher-forced argmax chain
on the Transformer; a prompt longer than the position table is refused."""

import pytest
import torch

from plm_toolkit.commands.export import export_checkpoint
from plm_toolkit.commands.generate import run as generate
from plm_toolkit.core.errors import DataError
from plm_toolkit.interop.pretrained import load_language_model

from ..conftest import save_untrained, tiny_transformer
from .conftest import generate_config

# Three lengths in one batch; the first asks T5 to fill two spans.
PROMPTS = [
    "The <extra_id_0> of the film is <extra_id_1> good.",
    "a charming and often affecting journey",
    "it is a beautiful , moving picture about the way we live now and the people we love",
]


@pytest.fixture(scope="module")
def untied_transformer(tmp_path_factory, bpe_tokenizer):
    """Untied, so that greedy decoding of the random model is not one token repeated."""
    model = tiny_transformer(bpe_tokenizer, share_embeddings=False)
    return save_untrained(tmp_path_factory.mktemp("untied"), model, bpe_tokenizer)


@pytest.fixture
def prompts_file(tmp_path):
    path = tmp_path / "prompts.txt"
    path.write_text("\n".join(PROMPTS) + "\n", encoding="utf-8")
    return path


def decode_with(checkpoint, prompts_file, *overrides):
    return generate(generate_config(f"checkpoint={checkpoint}", f"prompts_file={prompts_file}", *overrides))


def until_eos(tokens: list[int], eos_id: int) -> list[int]:
    """A transformers output row without its start token, up to and with the end token (then it pads)."""
    return tokens[: tokens.index(eos_id) + 1] if eos_id in tokens else tokens


@pytest.mark.parametrize("beams", [1, 3])
def test_t5_greedy_and_beam_search_equal_transformers_generate(t5_checkpoint, prompts_file, tmp_path, beams):
    transformers = pytest.importorskip("transformers")
    # Beam search with length_penalty=0: both rank hypotheses by their summed log-probability.
    search = [f"num_beams={beams}", "max_new_tokens=9", "length_penalty=0"]
    rows = decode_with(t5_checkpoint, prompts_file, *search)
    export_checkpoint(t5_checkpoint, tmp_path / "hf")
    reference = transformers.T5ForConditionalGeneration.from_pretrained(tmp_path / "hf").eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    batch = tokenizer(PROMPTS, padding=True, return_tensors="pt")  # right-padded, </s> appended
    for row, ids, mask in zip(rows, batch.input_ids, batch.attention_mask, strict=True):
        assert row["prompt_ids"] == ids[mask.bool()].tolist()
    with torch.no_grad():
        expected = reference.generate(**batch, max_new_tokens=9, num_beams=beams, length_penalty=0.0, do_sample=False)
    for row, tokens in zip(rows, expected[:, 1:].tolist(), strict=True):
        assert row["token_ids"] == until_eos(tokens, tokenizer.eos_token_id)
    # The text keeps the sentinels that mark the spans (not the end token).
    lm = load_language_model(t5_checkpoint)
    assert rows[0]["text"] == lm.tokenizer.decode(
        [t for t in rows[0]["token_ids"] if t != 1], skip_special_tokens=False
    )


def test_transformer_greedy_is_the_teacher_forced_argmax_and_one_beam_is_greedy(untied_transformer, prompts_file):
    rows = decode_with(untied_transformer, prompts_file, "max_new_tokens=12", "batch_size=3")
    lm = load_language_model(untied_transformer)
    model, start = lm.model, lm.model.decoder_start_token_id
    for row in rows:
        assert row["prompt_ids"][-1] == model.config.eos_token_id  # the source ends as in training
        source = torch.tensor([row["prompt_ids"]])  # alone: no padding, positions from 0
        decoder_input = torch.tensor([[start, *row["token_ids"][:-1]]])
        with torch.no_grad():
            scores = model.logits(model(source, torch.ones_like(source), decoder_input).hidden[0])
        assert scores.argmax(-1).tolist() == row["token_ids"]
    assert decode_with(untied_transformer, prompts_file, "max_new_tokens=12", "num_beams=1") == rows
    beams = decode_with(untied_transformer, prompts_file, "max_new_tokens=12", "num_beams=4", "length_penalty=0.6")
    assert all(row["token_ids"] for row in beams)


def test_a_prompt_longer_than_the_position_table_is_refused(transformer_checkpoint, tmp_path):
    # The tiny Transformer has 128 positions; 200 words make more tokens than that. (The command line's one line,
    # naming prompts_file:line, is a case of tests/bad_inputs.)
    overrides = [f"checkpoint={transformer_checkpoint}", f"prompt='{' '.join(['word'] * 200)}'"]
    expected = r"^prompt: \d+ tokens with the end token, more than the model's 128 \(max_position_embeddings\); .*'word"
    with pytest.raises(DataError, match=expected):
        generate(generate_config(*overrides))
