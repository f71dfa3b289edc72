"""GPT-2 and GPT against transformers' GPT2LMHeadModel and OpenAIGPTLMHeadModel on odd-sized random weights: logits
with padding, import and export both ways, and greedy (and beam) generation token for token."""

import json

import pytest
import torch
import torch.nn.functional as F

from plm_toolkit.core.errors import CheckpointError
from plm_toolkit.generation.decoding import SearchConfig, generate
from plm_toolkit.interop.hf import export_hf, import_hf
from plm_toolkit.models.gpt import GPT, GPT2Config

transformers = pytest.importorskip("transformers")

VOCAB, HIDDEN, INNER, LAYERS, HEADS, POSITIONS = 99, 36, 37, 2, 3, 40
TOLERANCE = 1e-5


def randomized(model):
    """transformers starts biases at 0 and LayerNorms at 1 / 0: perturb everything so no mapping error can hide."""
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    return model.eval()


def gpt2_reference():
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, n_inner=INNER, n_positions=POSITIONS
    )
    return randomized(transformers.GPT2LMHeadModel(config))


def openai_reference(afn="gelu"):
    torch.manual_seed(0)
    config = transformers.OpenAIGPTConfig(
        vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, n_positions=POSITIONS, afn=afn
    )
    return randomized(transformers.OpenAIGPTLMHeadModel(config))


def save(model, folder):
    model.save_pretrained(folder)
    vocab = {f"t{i}": i for i in range(VOCAB - 1)} | {"<|endoftext|>": VOCAB - 1}
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    return folder


def load(folder):
    imported = import_hf(folder)
    model = GPT(imported.model_config).eval()
    model.load_state_dict(imported.model_state)
    return imported, model


def logits(model, ids, mask=None):
    return F.linear(model(ids, attention_mask=mask).hidden, model.input_embeddings.weight)


def padded_batch():
    ids = torch.randint(0, VOCAB, (3, 13))
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    mask[2, 4:] = 0
    return ids, mask


@pytest.mark.parametrize("kind", ["gpt2", "openai-gpt", "openai-gpt-relu"])
def test_logits_match_transformers_both_ways(tmp_path, kind):
    reference = gpt2_reference() if kind == "gpt2" else openai_reference("relu" if "relu" in kind else "gelu")
    imported, model = load(save(reference, tmp_path / "hf"))
    assert imported.objective == "clm" and imported.objective_state == {}
    assert model.config.name == ("gpt2" if kind == "gpt2" else "gpt")
    ids, mask = padded_batch()
    with torch.no_grad():
        theirs = reference(input_ids=ids, attention_mask=mask).logits
        ours = logits(model, ids, mask)
    real = mask.bool()
    assert (ours[real] - theirs[real]).abs().max().item() <= TOLERANCE

    # Ours -> theirs: a freshly initialised model of ours, exported, loads into transformers with the same logits.
    torch.manual_seed(1)
    fresh = GPT(imported.model_config).eval()
    export_hf(tmp_path / "out", fresh, {}, imported.tokenizer_file)
    cls = transformers.GPT2LMHeadModel if kind == "gpt2" else transformers.OpenAIGPTLMHeadModel
    reloaded, info = cls.from_pretrained(tmp_path / "out", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    with torch.no_grad():
        theirs = reloaded.eval()(input_ids=ids, attention_mask=mask).logits
        ours = logits(fresh, ids, mask)
    assert (ours[real] - theirs[real]).abs().max().item() <= TOLERANCE
    again, _ = load(tmp_path / "out")
    assert again.model_config == imported.model_config
    assert all(torch.equal(again.model_state[k], v) for k, v in fresh.state_dict().items())
    assert (tmp_path / "out" / "vocab.json").is_file() and (tmp_path / "out" / "merges.txt").is_file()


def left_padded(prompts, pad_id=0):
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id)
    mask = torch.zeros_like(ids)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(prompt)
        mask[row, width - len(prompt) :] = 1
    return ids, mask


@pytest.mark.parametrize("num_beams", [1, 3])
def test_generation_matches_transformers_generate(tmp_path, num_beams):
    reference = gpt2_reference()
    _, model = load(save(reference, tmp_path / "hf"))
    prompts = [[5, 17, 42, 8, 91, 3], [64, 2], [11, 12, 13, 14]]
    ids, mask = left_padded(prompts)
    eos = 7
    with torch.no_grad():
        theirs = reference.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=15,
            do_sample=False,
            num_beams=num_beams,
            length_penalty=0.0,
            eos_token_id=eos,
            pad_token_id=0,
        )[:, ids.shape[1] :]
    head = lambda hidden: F.linear(hidden, model.input_embeddings.weight)
    ours = generate(model.decoder(head), ids, mask, SearchConfig(max_new_tokens=15, num_beams=num_beams, eos_id=eos))
    for row, tokens in enumerate(ours):
        expected = theirs[row].tolist()
        if eos in expected:
            expected = expected[: expected.index(eos) + 1]
        assert tokens == expected, (row, tokens, expected)


def test_layouts_transformers_cannot_hold_are_refused(tmp_path):
    gpt2 = GPT(GPT2Config(vocab_size=VOCAB, hidden_size=HIDDEN, num_layers=1, num_heads=HEADS))
    with pytest.raises(CheckpointError, match="transformers' gpt2 LM head is the token embedding alone"):
        export_hf(tmp_path / "a", gpt2, {"bias": torch.zeros(VOCAB)})
    from plm_toolkit.models.gpt import GPTConfig

    gpt = GPT(GPTConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_layers=1, num_heads=HEADS, intermediate_size=37))
    with pytest.raises(CheckpointError, match="fixes it at 4 x model.hidden_size = 144"):
        export_hf(tmp_path / "b", gpt)
