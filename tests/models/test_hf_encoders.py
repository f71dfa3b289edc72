"""Parity with transformers' RoBERTa, ALBERT and ELECTRA on identical random weights (odd sizes), and lossless
import -> export -> import round trips through the per-family adapters."""

import json

import pytest
import torch

from plm_toolkit.core.errors import CheckpointError
from plm_toolkit.data.tokenization.vocab import Vocab
from plm_toolkit.interop.hf import export_hf, import_hf
from plm_toolkit.models.albert import Albert
from plm_toolkit.models.bert import Bert
from plm_toolkit.models.electra import Electra
from plm_toolkit.objectives.mlm import MaskedLanguageModeling, MlmConfig
from plm_toolkit.objectives.mlm_sop import MlmSop, MlmSopConfig
from plm_toolkit.objectives.rtd import ReplacedTokenDetection, RtdConfig

transformers = pytest.importorskip("transformers")

VOCAB, HIDDEN, INTERMEDIATE, LAYERS, HEADS, EMBEDDING, POSITIONS = 99, 36, 37, 2, 3, 17, 40
TOLERANCE = 1e-5
SIZES = dict(
    vocab_size=VOCAB,
    hidden_size=HIDDEN,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    intermediate_size=INTERMEDIATE,
    max_position_embeddings=POSITIONS,
)


def randomized(model):
    """HF's init leaves biases at 0 and LayerNorms at 1/0; perturb everything so no mapping error can hide."""
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    return model.eval()


def save(model, folder):
    model.save_pretrained(folder)
    (folder / "vocab.txt").write_text("\n".join(f"tok{i}" for i in range(VOCAB)) + "\n")
    return folder


def batch(pad_id=0):
    ids = torch.randint(5, VOCAB, (3, 13))
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    mask[2, 5:] = 0
    ids[mask == 0] = pad_id
    types = torch.zeros_like(ids)
    types[:, 6:] = 1
    return ids, mask, types


def build(imported, objective_cls, config_cls):
    model = {"bert": Bert, "albert": Albert, "electra": Electra}[imported.model_config.name](imported.model_config)
    model.load_state_dict(imported.model_state)
    config = config_cls(**imported.objective_overrides)
    objective = objective_cls(config, model, Vocab(VOCAB, 0, 1, 2, 3, 4))
    objective.load_state_dict(imported.objective_state)  # strict: the layouts agree key for key
    return model.eval(), objective.eval()


def max_diff(a, b):
    return (a - b).abs().max().item()


def assert_round_trip(imported, model, folder, **kwargs):
    export_hf(folder, model, imported.objective_state, imported.tokenizer_file, **kwargs)
    again = import_hf(folder)
    assert again.model_config == imported.model_config and again.objective == imported.objective
    for first, second in ((imported.model_state, again.model_state), (imported.objective_state, again.objective_state)):
        assert first.keys() == second.keys()
        assert all(torch.equal(first[k], second[k]) for k in first)
    return again


def test_roberta_for_masked_lm(tmp_path):
    config = transformers.RobertaConfig(**SIZES | {"max_position_embeddings": POSITIONS + 2}, type_vocab_size=1)
    reference = randomized(transformers.RobertaForMaskedLM(config))
    with pytest.warns(UserWarning, match="no pooler"):  # RobertaForMaskedLM has none
        imported = import_hf(save(reference, tmp_path / "hf"))
    assert imported.objective == "mlm" and imported.model_config.position_offset == 2
    model, objective = build(imported, MaskedLanguageModeling, MlmConfig)
    ids, mask, _ = batch(pad_id=1)
    with torch.no_grad():
        theirs = reference(input_ids=ids, attention_mask=mask).logits
        ours = objective.head(model(ids, mask).hidden, model.input_embeddings.weight)
    real = mask.bool()  # transformers gives padding the position padding_idx; nothing reads those outputs
    assert max_diff(ours[real], theirs[real]) <= TOLERANCE

    assert_round_trip(imported, model, tmp_path / "out")
    reloaded, info = transformers.RobertaForMaskedLM.from_pretrained(tmp_path / "out", output_loading_info=True)
    assert not info["missing_keys"] and not info["mismatched_keys"]
    with torch.no_grad():
        assert torch.equal(reloaded.eval()(input_ids=ids, attention_mask=mask).logits, theirs)


@pytest.mark.parametrize("groups,sharing", [(1, "all"), (LAYERS, "none")])
def test_albert_for_pretraining(tmp_path, groups, sharing):
    config = transformers.AlbertConfig(**SIZES, embedding_size=EMBEDDING, num_hidden_groups=groups)
    reference = randomized(transformers.AlbertForPreTraining(config))
    imported = import_hf(save(reference, tmp_path / "hf"))
    assert imported.objective == "mlm_sop" and imported.model_config.sharing == sharing
    model, objective = build(imported, MlmSop, MlmSopConfig)
    ids, mask, types = batch()
    with torch.no_grad():
        theirs = reference(input_ids=ids, attention_mask=mask, token_type_ids=types)
        reps = model(ids, mask, types)
        mlm = objective.mlm.head(reps.hidden, model.input_embeddings.weight)
        sop = objective.sop.head(reps.pooled)
    assert max_diff(mlm, theirs.prediction_logits) <= TOLERANCE
    assert max_diff(sop, theirs.sop_logits) <= TOLERANCE

    assert_round_trip(imported, model, tmp_path / "out")
    _, info = transformers.AlbertForPreTraining.from_pretrained(tmp_path / "out", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]


def electra_pair(tmp_path):
    """A discriminator and a generator folder whose embeddings are tied, as ELECTRA trains them."""
    disc = randomized(transformers.ElectraForPreTraining(transformers.ElectraConfig(**SIZES, embedding_size=EMBEDDING)))
    gen_sizes = SIZES | {"hidden_size": 12, "num_attention_heads": 3, "intermediate_size": 19}
    gen = randomized(transformers.ElectraForMaskedLM(transformers.ElectraConfig(**gen_sizes, embedding_size=EMBEDDING)))
    with torch.no_grad():
        gen.electra.embeddings.load_state_dict(disc.electra.embeddings.state_dict())
    folder = save(disc, tmp_path / "hf")
    save(gen, tmp_path / "hf" / "generator")
    return disc, gen, folder


def test_electra_discriminator_and_generator(tmp_path):
    disc, gen, folder = electra_pair(tmp_path)
    imported = import_hf(folder)
    assert imported.objective == "rtd" and imported.objective_overrides["generator_hidden_size"] == 12
    model, objective = build(imported, ReplacedTokenDetection, RtdConfig)
    ids, mask, types = batch()
    with torch.no_grad():
        theirs_disc = disc(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
        theirs_gen = gen(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
        ours_disc = objective.discriminator_head(model(ids, mask, types).hidden)
        hidden = objective.generator(model.embeddings(ids, types), mask)
        ours_gen = objective.generator.head(hidden, model.input_embeddings.weight)
    assert max_diff(ours_disc, theirs_disc) <= TOLERANCE
    assert max_diff(ours_gen, theirs_gen) <= TOLERANCE

    again = assert_round_trip(
        imported, model, tmp_path / "out", objective_config=RtdConfig(**imported.objective_overrides)
    )
    assert again.objective_overrides == imported.objective_overrides
    for cls, path in ((transformers.ElectraForPreTraining, "out"), (transformers.ElectraForMaskedLM, "out/generator")):
        _, info = cls.from_pretrained(tmp_path / path, output_loading_info=True)
        assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]


def test_electra_untied_generator_embeddings_warn(tmp_path):
    _, gen, folder = electra_pair(tmp_path)
    with torch.no_grad():
        gen.electra.embeddings.word_embeddings.weight.add_(1.0)
    gen.save_pretrained(folder / "generator")
    with pytest.warns(UserWarning, match="ELECTRA shares the embeddings"):
        import_hf(folder)


def test_unsupported_layouts_are_refused(tmp_path):
    config = transformers.AlbertConfig(**SIZES, embedding_size=EMBEDDING, num_hidden_groups=LAYERS, inner_group_num=2)
    folder = save(randomized(transformers.AlbertModel(config)), tmp_path / "inner")
    with pytest.raises(CheckpointError, match="inner_group_num=2"):
        import_hf(folder)
    (folder / "config.json").write_text(json.dumps({"model_type": "bart"}))
    with pytest.raises(CheckpointError, match="model_type is 'bart'; supported: albert, bert, electra, .*roberta, t5"):
        import_hf(folder)
    from plm_toolkit.models.albert import AlbertConfig

    shared_attention = Albert(AlbertConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_heads=HEADS, sharing="attention"))
    with pytest.raises(CheckpointError, match="model.sharing=attention has no Hugging Face ALBERT layout"):
        export_hf(tmp_path / "bad", shared_attention)
