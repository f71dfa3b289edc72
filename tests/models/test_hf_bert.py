"""Parity with Hugging Face ``transformers`` BERT on identical weights, and the import/export adapter's contract."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from plm_toolkit.core.errors import CheckpointError
from plm_toolkit.data.tokenization.vocab import Vocab
from plm_toolkit.interop.hf import export_hf, import_hf
from plm_toolkit.models.bert import Bert
from plm_toolkit.objectives.mlm_nsp import MlmNsp, MlmNspConfig

transformers = pytest.importorskip("transformers")

VOCAB, HIDDEN, INTERMEDIATE, LAYERS, HEADS, POSITIONS = 99, 32, 37, 2, 4, 40
TOLERANCE = 1e-5


def hf_config(**overrides):
    fields = dict(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        intermediate_size=INTERMEDIATE,
        max_position_embeddings=POSITIONS,
    )
    return transformers.BertConfig(**(fields | overrides))


def randomized(model):
    """HF's init leaves biases at 0 and LayerNorms at 1/0; perturb everything so no mapping error can hide."""
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    return model.eval()


def write_vocab(folder: Path) -> None:
    (folder / "vocab.txt").write_text("\n".join(f"tok{i}" for i in range(VOCAB)) + "\n")


def save_hf(model, folder: Path) -> Path:
    model.save_pretrained(folder)
    write_vocab(folder)
    return folder


def batch():
    ids = torch.randint(1, VOCAB, (3, 13))
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    mask[2, 5:] = 0
    ids[mask == 0] = 0
    types = torch.zeros_like(ids)
    types[:, 6:] = 1
    return ids, mask, types


def load_ours(imported) -> Bert:
    model = Bert(imported.model_config).eval()
    model.load_state_dict(imported.model_state)
    return model


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


@pytest.fixture
def pretraining_folder(tmp_path):
    return save_hf(randomized(transformers.BertForPreTraining(hf_config())), tmp_path / "hf")


def test_backbone_and_heads_match_bert_for_pretraining(pretraining_folder):
    reference = transformers.BertForPreTraining.from_pretrained(pretraining_folder).eval()
    imported = import_hf(pretraining_folder, expect="bert")
    model = load_ours(imported)
    objective = MlmNsp(MlmNspConfig(), model, Vocab(VOCAB, 0, 1, 2, 3, 4)).eval()
    objective.load_state_dict(imported.objective_state)  # strict: the layouts agree key for key
    assert imported.tokenizer_file.name == "vocab.txt" and imported.initialized_keys == []

    ids, mask, types = batch()
    with torch.no_grad():
        theirs = reference(input_ids=ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True)
        backbone = reference.bert(input_ids=ids, attention_mask=mask, token_type_ids=types)
        ours = model(ids, mask, types)
        mlm_logits = objective.mlm.head(ours.hidden, model.input_embeddings.weight)
        nsp_logits = objective.nsp.head(ours.pooled)
    assert max_diff(ours.hidden, backbone.last_hidden_state) <= TOLERANCE
    assert max_diff(ours.pooled, backbone.pooler_output) <= TOLERANCE
    assert max_diff(mlm_logits, theirs.prediction_logits) <= TOLERANCE
    assert max_diff(nsp_logits, theirs.seq_relationship_logits) <= TOLERANCE


@pytest.mark.parametrize("hidden_act", ["gelu", "gelu_new", "relu"])
def test_bert_model_without_prefix_matches(tmp_path, hidden_act):
    reference = randomized(transformers.BertModel(hf_config(hidden_act=hidden_act)))
    imported = import_hf(save_hf(reference, tmp_path), expect="bert")
    assert imported.objective_state == {}
    ids, mask, types = batch()
    with torch.no_grad():
        theirs = reference(input_ids=ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True)
        ours = load_ours(imported)(ids, mask, types, output_all_hidden=True)
    assert max_diff(ours.hidden, theirs.last_hidden_state) <= TOLERANCE
    assert max_diff(ours.pooled, theirs.pooler_output) <= TOLERANCE
    for mine, reference_layer in zip(ours.all_hidden, theirs.hidden_states, strict=True):
        assert max_diff(mine, reference_layer) <= TOLERANCE


def test_masked_lm_checkpoint_gets_a_fresh_pooler(tmp_path):
    folder = save_hf(randomized(transformers.BertForMaskedLM(hf_config())), tmp_path)
    with pytest.warns(UserWarning, match="no pooler"):
        imported = import_hf(folder, expect="bert")
    assert imported.initialized_keys == ["pooler.dense.weight", "pooler.dense.bias"]
    assert sorted(imported.objective_state) == [
        "mlm.head.bias",
        "mlm.head.dense.bias",
        "mlm.head.dense.weight",
        "mlm.head.layer_norm.bias",
        "mlm.head.layer_norm.weight",
    ]
    load_ours(imported)


def test_round_trip_is_lossless_and_transformers_loads_the_export(pretraining_folder, tmp_path):
    first = import_hf(pretraining_folder, expect="bert")
    model = load_ours(first)
    export_hf(tmp_path / "out", model, first.objective_state, first.tokenizer_file)
    second = import_hf(tmp_path / "out", expect="bert")
    assert second.model_config == first.model_config
    for ours, theirs in ((first.model_state, second.model_state), (first.objective_state, second.objective_state)):
        assert ours.keys() == theirs.keys()
        assert all(torch.equal(ours[key], theirs[key]) for key in ours)
    assert (tmp_path / "out" / "vocab.txt").read_text() == first.tokenizer_file.read_text()

    reloaded, info = transformers.BertForPreTraining.from_pretrained(tmp_path / "out", output_loading_info=True)
    assert not info["missing_keys"]
    assert not info["unexpected_keys"] and not info["mismatched_keys"]
    original = transformers.BertForPreTraining.from_pretrained(pretraining_folder).eval()
    ids, mask, types = batch()
    with torch.no_grad():
        a = original(input_ids=ids, attention_mask=mask, token_type_ids=types)
        b = reloaded.eval()(input_ids=ids, attention_mask=mask, token_type_ids=types)
    assert torch.equal(a.prediction_logits, b.prediction_logits)
    assert torch.equal(a.seq_relationship_logits, b.seq_relationship_logits)


def test_export_of_a_backbone_with_plain_mlm_head_layout(pretraining_folder, tmp_path):
    imported = import_hf(pretraining_folder, expect="bert")
    plain_mlm = {k.removeprefix("mlm."): v for k, v in imported.objective_state.items() if k.startswith("mlm.")}
    export_hf(tmp_path / "mlm", load_ours(imported), plain_mlm)
    assert json.loads((tmp_path / "mlm" / "config.json").read_text())["architectures"] == ["BertForMaskedLM"]
    _, info = transformers.BertForMaskedLM.from_pretrained(tmp_path / "mlm", output_loading_info=True)
    assert not info["missing_keys"]

    export_hf(tmp_path / "plain", load_ours(imported))
    _, info = transformers.BertModel.from_pretrained(tmp_path / "plain", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    with pytest.raises(CheckpointError, match="generator"):
        export_hf(tmp_path / "bad", load_ours(imported), {"generator.weight": torch.zeros(1)})


def test_pytorch_bin_with_tf_era_names_matches_safetensors(pretraining_folder, tmp_path):
    reference = transformers.BertForPreTraining.from_pretrained(pretraining_folder)
    state = {}
    for key, value in reference.state_dict().items():
        # Old releases name LayerNorm parameters gamma/beta and keep the tied decoder and a position buffer.
        key = key.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")
        state[key] = value.clone()
    state["bert.embeddings.position_ids"] = torch.arange(POSITIONS)[None]
    folder = tmp_path / "bin"
    folder.mkdir()
    torch.save(state, folder / "pytorch_model.bin")
    shutil.copy(pretraining_folder / "config.json", folder)
    write_vocab(folder)
    from_bin, from_safetensors = import_hf(folder, expect="bert"), import_hf(pretraining_folder, expect="bert")
    for key, value in from_safetensors.model_state.items():
        assert torch.equal(from_bin.model_state[key], value), key
    for key, value in from_safetensors.objective_state.items():
        assert torch.equal(from_bin.objective_state[key], value), key


def test_errors_name_the_file_and_key(pretraining_folder):
    weights = pretraining_folder / "model.safetensors"
    state = load_file(weights)

    save_file({**state, "classifier.weight": torch.zeros(2, HIDDEN)}, weights, metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match="unexpected key.*classifier.weight"):
        import_hf(pretraining_folder, expect="bert")

    smaller = {k: v for k, v in state.items() if k != "bert.encoder.layer.1.output.dense.bias"}
    save_file(smaller, weights, metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match="missing key.*encoder.layer.1.output.dense.bias"):
        import_hf(pretraining_folder, expect="bert")

    save_file(state, weights, metadata={"format": "pt"})
    config = json.loads((pretraining_folder / "config.json").read_text())
    (pretraining_folder / "config.json").write_text(json.dumps(config | {"intermediate_size": 38}))
    with pytest.raises(CheckpointError, match="intermediate.dense.weight has shape"):
        import_hf(pretraining_folder, expect="bert")

    weights.write_bytes(b"not a safetensors file at all")
    with pytest.raises(CheckpointError, match="model.safetensors"):
        import_hf(pretraining_folder, expect="bert")

    weights.unlink()
    with pytest.raises(CheckpointError, match="no model.safetensors or pytorch_model.bin"):
        import_hf(pretraining_folder, expect="bert")

    (pretraining_folder / "config.json").unlink()
    with pytest.raises(CheckpointError, match="config.json"):
        import_hf(pretraining_folder, expect="bert")


def test_truncated_safetensors_is_a_checkpoint_error(pretraining_folder):
    weights = pretraining_folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    with pytest.raises(CheckpointError, match=str(weights)):
        import_hf(pretraining_folder, expect="bert")


@pytest.fixture
def minilm(shared_data) -> Path:
    """all-MiniLM-L6-v2 in Hugging Face layout, fetched once into a cache that outlives the session (the script
    only checks the checksum when the cache holds it)."""
    script = shared_data / "models" / "fetch-minilm.sh"
    if not script.is_file():
        pytest.skip(f"{script} not found (../shared absent)")
    cache = Path(os.environ.get("PLM_TEST_CACHE", Path.home() / ".cache" / "plm_toolkit" / "test"))
    dest = cache / "minilm"
    try:
        subprocess.run(["bash", str(script), str(dest)], check=True, capture_output=True, timeout=600)
    except (subprocess.SubprocessError, OSError) as error:
        pytest.skip(f"could not fetch all-MiniLM-L6-v2: {error}")
    return dest


def test_real_checkpoint_minilm_matches_transformers(minilm):
    tokenizers = pytest.importorskip("tokenizers")
    tokenizer = tokenizers.Tokenizer.from_file(str(minilm / "tokenizer.json"))
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    tokenizer.no_truncation()
    encodings = tokenizer.encode_batch(
        [
            ("The cat sat on the mat.", "It was warm there."),
            "Pretrained language models learn from unlabeled text.",
            "Short one.",
        ]
    )
    ids = torch.tensor([e.ids for e in encodings])
    mask = torch.tensor([e.attention_mask for e in encodings])
    types = torch.tensor([e.type_ids for e in encodings])
    assert mask.min() == 0  # the batch really is padded

    imported = import_hf(minilm, expect="bert")
    assert imported.tokenizer_file.name == "tokenizer.json"
    reference = transformers.BertModel.from_pretrained(minilm).eval()
    with torch.no_grad():
        theirs = reference(input_ids=ids, attention_mask=mask, token_type_ids=types)
        ours = load_ours(imported)(ids, mask, types)
    real = mask.bool()
    assert max_diff(ours.hidden[real], theirs.last_hidden_state[real]) <= TOLERANCE
    assert max_diff(ours.pooled, theirs.pooler_output) <= TOLERANCE
    # Outputs at padding positions are never read, and their rounding depends on the attention kernel: there
    # transformers' own sdpa and eager implementations differ by ~5e-5 on this checkpoint.
    assert max_diff(ours.hidden[~real], theirs.last_hidden_state[~real]) <= 1e-3
