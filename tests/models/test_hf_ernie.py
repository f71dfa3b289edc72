"""ERNIE against transformers' ErnieModel / ErnieForPreTraining / ErnieForMaskedLM on odd sizes with padding and
task types: imports match to 1e-5 in fp32, exports load into transformers and match, and the backbone trains and
fine-tunes from a Hugging Face folder."""

import json
from pathlib import Path

import pytest
import torch

from plm_toolkit.data.tokenization.vocab import Vocab
from plm_toolkit.interop.hf import export_hf, import_hf
from plm_toolkit.interop.pretrained import load_backbone
from plm_toolkit.models.ernie import Ernie, ErnieConfig
from plm_toolkit.objectives.knowledge_masking import KnowledgeMasking, KnowledgeMaskingConfig
from plm_toolkit.objectives.mlm_nsp import MlmNsp, MlmNspConfig
from tests.models.test_hf_bert import randomized

transformers = pytest.importorskip("transformers")

VOCAB, HIDDEN, INTERMEDIATE, LAYERS, HEADS, POSITIONS, TYPES, TASKS = 99, 36, 37, 2, 3, 40, 4, 5
TOLERANCE = 1e-5


def hf_config(**overrides):
    fields = dict(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        intermediate_size=INTERMEDIATE,
        max_position_embeddings=POSITIONS,
        type_vocab_size=TYPES,
        use_task_id=True,
        task_type_vocab_size=TASKS,
        hidden_act="relu",
    )
    return transformers.ErnieConfig(**(fields | overrides))


def save_hf(model, folder: Path) -> Path:
    model.save_pretrained(folder)
    (folder / "vocab.txt").write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"t{i}" for i in range(VOCAB - 5)]) + "\n"
    )
    return folder


def batch():
    ids = torch.randint(5, VOCAB, (3, 13))
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    mask[2, 5:] = 0
    ids[mask == 0] = 0
    types = torch.randint(0, TYPES, ids.shape)
    tasks = torch.randint(0, TASKS, ids.shape)
    return ids, mask, types, tasks


def load_ours(imported) -> Ernie:
    model = Ernie(imported.model_config).eval()
    model.load_state_dict(imported.model_state)
    return model


def max_diff(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor | None = None) -> float:
    difference = (a - b).abs()
    return (difference[mask.bool()] if mask is not None else difference).max().item()


VOCAB_ROLES = Vocab(VOCAB, pad_id=0, unk_id=1, cls_id=2, sep_id=3, mask_id=4)


def test_backbone_and_heads_match_ernie_for_pretraining(tmp_path):
    folder = save_hf(randomized(transformers.ErnieForPreTraining(hf_config())), tmp_path / "hf")
    reference = transformers.ErnieForPreTraining.from_pretrained(folder).eval()
    imported = import_hf(folder)
    assert imported.model_config.use_task_id and imported.model_config.task_type_vocab_size == TASKS
    model = load_ours(imported)
    objective = MlmNsp(MlmNspConfig(), model, VOCAB_ROLES).eval()
    objective.load_state_dict(imported.objective_state)  # strict: the layouts agree key for key
    ids, mask, types, tasks = batch()
    with torch.no_grad():
        theirs = reference(input_ids=ids, attention_mask=mask, token_type_ids=types, task_type_ids=tasks)
        backbone = reference.ernie(input_ids=ids, attention_mask=mask, token_type_ids=types, task_type_ids=tasks)
        ours = model(ids, mask, types, task_type_ids=tasks)
        mlm_logits = objective.mlm.head(ours.hidden, model.input_embeddings.weight)
        nsp_logits = objective.nsp.head(ours.pooled)
    assert max_diff(ours.hidden, backbone.last_hidden_state, mask) <= TOLERANCE
    assert max_diff(ours.pooled, backbone.pooler_output) <= TOLERANCE
    assert max_diff(mlm_logits, theirs.prediction_logits, mask) <= TOLERANCE
    assert max_diff(nsp_logits, theirs.seq_relationship_logits) <= TOLERANCE
    # Without task ids both use task 0.
    with torch.no_grad():
        plain = reference.ernie(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
        assert max_diff(model(ids, mask, types).hidden, plain, mask) <= TOLERANCE


def test_ernie_1_0_model_without_task_types_matches(tmp_path):
    reference = randomized(transformers.ErnieModel(hf_config(use_task_id=False, type_vocab_size=2)))
    imported = import_hf(save_hf(reference, tmp_path))
    assert not imported.model_config.use_task_id and imported.objective_state == {}
    ids, mask, types, _ = batch()
    types = types.clamp(max=1)
    with torch.no_grad():
        theirs = reference(input_ids=ids, attention_mask=mask, token_type_ids=types)
        ours = load_ours(imported)(ids, mask, types)
    assert "embeddings.task_type_embeddings.weight" not in imported.model_state
    assert max_diff(ours.hidden, theirs.last_hidden_state, mask) <= TOLERANCE
    assert max_diff(ours.pooled, theirs.pooler_output) <= TOLERANCE


def test_masked_lm_import_and_knowledge_masking_export_round_trip(tmp_path):
    """ErnieForMaskedLM -> ours (fresh pooler) -> a knowledge_masking objective's head -> ErnieForMaskedLM again."""
    folder = save_hf(randomized(transformers.ErnieForMaskedLM(hf_config())), tmp_path / "hf")
    reference = transformers.ErnieForMaskedLM.from_pretrained(folder).eval()
    with pytest.warns(UserWarning, match="no pooler"):
        imported = import_hf(folder)
    model = load_ours(imported)
    objective = KnowledgeMasking(KnowledgeMaskingConfig(total_steps=10), model, VOCAB_ROLES).eval()
    objective.load_state_dict({k.removeprefix("mlm."): v for k, v in imported.objective_state.items()})
    ids, mask, types, tasks = batch()
    with torch.no_grad():
        theirs = reference(input_ids=ids, attention_mask=mask, token_type_ids=types, task_type_ids=tasks).logits
        ours = objective.head(model(ids, mask, types, task_type_ids=tasks).hidden, model.input_embeddings.weight)
    assert max_diff(ours, theirs, mask) <= TOLERANCE

    export_hf(tmp_path / "out", model, objective.state_dict(), imported.tokenizer_file)
    exported = json.loads((tmp_path / "out" / "config.json").read_text())
    assert exported["architectures"] == ["ErnieForMaskedLM"] and exported["model_type"] == "ernie"
    assert exported["use_task_id"] is True and exported["task_type_vocab_size"] == TASKS
    reloaded, info = transformers.ErnieForMaskedLM.from_pretrained(tmp_path / "out", output_loading_info=True)
    assert not info["missing_keys"] and not info["mismatched_keys"]
    # The pooler travels along (our importer reads it back); ErnieForMaskedLM has none and skips it, as BERT's.
    assert set(info["unexpected_keys"]) <= {"ernie.pooler.dense.weight", "ernie.pooler.dense.bias"}
    with torch.no_grad():
        again = reloaded.eval()(input_ids=ids, attention_mask=mask, token_type_ids=types, task_type_ids=tasks).logits
    assert max_diff(again, ours, mask) <= TOLERANCE


def test_our_ernie_exports_as_ernie_for_pretraining(tmp_path):
    """Export direction on weights that start on our side: odd sizes, task types, MLM + NSP heads."""
    torch.manual_seed(3)
    config = ErnieConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_layers=LAYERS,
        num_heads=HEADS,
        intermediate_size=INTERMEDIATE,
        max_position_embeddings=POSITIONS,
        type_vocab_size=TYPES,
        use_task_id=True,
        task_type_vocab_size=TASKS,
        hidden_dropout=0.0,
        attention_dropout=0.0,
    )
    model = Ernie(config).eval()
    objective = MlmNsp(MlmNspConfig(), model, VOCAB_ROLES).eval()
    with torch.no_grad():
        for parameter in [*model.parameters(), *objective.parameters()]:
            parameter.add_(torch.randn_like(parameter) * 0.05)
    (tmp_path / "vocab.txt").write_text("\n".join(f"t{i}" for i in range(VOCAB)) + "\n")
    export_hf(tmp_path / "out", model, objective.state_dict(), tmp_path / "vocab.txt")
    reference, info = transformers.ErnieForPreTraining.from_pretrained(tmp_path / "out", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    ids, mask, types, tasks = batch()
    with torch.no_grad():
        theirs = reference.eval()(input_ids=ids, attention_mask=mask, token_type_ids=types, task_type_ids=tasks)
        ours = model(ids, mask, types, task_type_ids=tasks)
        mlm_logits = objective.mlm.head(ours.hidden, model.input_embeddings.weight)
    assert max_diff(mlm_logits, theirs.prediction_logits, mask) <= TOLERANCE
    assert max_diff(objective.nsp.head(ours.pooled), theirs.seq_relationship_logits) <= TOLERANCE


def test_fine_tuning_loads_an_ernie_folder(tmp_path):
    folder = save_hf(randomized(transformers.ErnieModel(hf_config())), tmp_path / "hf")
    loaded = load_backbone(folder)
    assert loaded.kind == "hf:ernie" and isinstance(loaded.model, Ernie)
    assert loaded.model.config.use_task_id
