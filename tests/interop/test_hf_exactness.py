"""Exports that transformers would load differently are refused; the heads follow each family's reference.

RoBERTa's LM head and ELECTRA's generator head apply the exact gelu whatever hidden_act is; BERT's and ALBERT's
apply hidden_act. ELECTRA's generator head count must come from the run's rtd config. XLNet needs
d_head = d_model / n_head in transformers.
"""

import json

import pytest
import torch
from hydra import compose, initialize_config_module

import plm_toolkit.commands.train  # noqa: F401  (registers schemas, registries and resolvers)
from plm_toolkit.config.train_checks import problems
from plm_toolkit.core.errors import CheckpointError
from plm_toolkit.data.tokenization.vocab import Vocab
from plm_toolkit.interop.hf import export_hf, import_hf
from plm_toolkit.models.bert import Bert, BertConfig
from plm_toolkit.models.electra import Electra, ElectraConfig
from plm_toolkit.models.xlnet import XLNet, XLNetConfig
from plm_toolkit.objectives.mlm import MaskedLanguageModeling, MlmConfig
from plm_toolkit.objectives.rtd import ReplacedTokenDetection, RtdConfig
from tests.interop.test_hf_encoders import SIZES, VOCAB, batch, max_diff, randomized, save

transformers = pytest.importorskip("transformers")
VOCAB_ROLES = Vocab(VOCAB, 0, 1, 2, 3, 4)


@pytest.mark.parametrize("act", ["gelu_new", "relu"])
def test_roberta_head_applies_exact_gelu_whatever_hidden_act(tmp_path, act):
    config = transformers.RobertaConfig(**SIZES | {"max_position_embeddings": 42}, type_vocab_size=1, hidden_act=act)
    reference = randomized(transformers.RobertaForMaskedLM(config))
    with pytest.warns(UserWarning, match="no pooler"):
        imported = import_hf(save(reference, tmp_path / "hf"))
    assert imported.model_config.head_act == "gelu"
    model = Bert(imported.model_config).eval()
    model.load_state_dict(imported.model_state)
    objective = MaskedLanguageModeling(MlmConfig(), model, VOCAB_ROLES).eval()
    objective.load_state_dict(imported.objective_state)
    ids, mask, _ = batch(pad_id=1)
    with torch.no_grad():
        theirs = reference(input_ids=ids, attention_mask=mask).logits
        ours = objective.head(model(ids, mask).hidden, model.input_embeddings.weight)
    assert max_diff(ours[mask.bool()], theirs[mask.bool()]) <= 1e-5

    export_hf(tmp_path / "out", model, imported.objective_state, imported.tokenizer_file)
    reloaded = transformers.RobertaForMaskedLM.from_pretrained(tmp_path / "out").eval()
    with torch.no_grad():
        assert torch.equal(reloaded(input_ids=ids, attention_mask=mask).logits, theirs)


@pytest.mark.parametrize("act", ["gelu_new", "relu"])
def test_electra_generator_head_applies_exact_gelu(tmp_path, act):
    disc_config = transformers.ElectraConfig(**SIZES, embedding_size=17, hidden_act=act)
    disc = randomized(transformers.ElectraForPreTraining(disc_config))
    gen_sizes = SIZES | {"hidden_size": 12, "num_attention_heads": 3, "intermediate_size": 19}
    gen = randomized(
        transformers.ElectraForMaskedLM(transformers.ElectraConfig(**gen_sizes, embedding_size=17, hidden_act=act))
    )
    with torch.no_grad():
        gen.electra.embeddings.load_state_dict(disc.electra.embeddings.state_dict())
    save(disc, tmp_path / "hf")
    save(gen, tmp_path / "hf" / "generator")
    imported = import_hf(tmp_path / "hf")
    model = Electra(imported.model_config).eval()
    model.load_state_dict(imported.model_state)
    rtd = RtdConfig(**imported.objective_overrides)
    objective = ReplacedTokenDetection(rtd, model, VOCAB_ROLES).eval()
    objective.load_state_dict(imported.objective_state)
    ids, mask, types = batch()
    with torch.no_grad():
        theirs = gen(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
        hidden = objective.generator(model.embeddings(ids, types), mask)
        ours = objective.generator.head(hidden, model.input_embeddings.weight)
        theirs_disc = disc(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
        ours_disc = objective.discriminator_head(model(ids, mask, types).hidden)
    assert max_diff(ours, theirs) <= 1e-5 and max_diff(ours_disc, theirs_disc) <= 1e-5


def trained_electra():
    """An ELECTRA as plm-train builds it: a generator of 3 heads at width 36 (the default rule would say 1)."""
    model = Electra(ElectraConfig(vocab_size=VOCAB, hidden_size=48, num_layers=2, num_heads=4, intermediate_size=37))
    rtd = RtdConfig(generator_hidden_size=36, generator_num_heads=3)
    objective = ReplacedTokenDetection(rtd, model, VOCAB_ROLES)
    with torch.no_grad():
        for p in objective.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model.eval(), objective.eval(), rtd


def test_electra_generator_export_needs_the_run_config_and_is_then_exact(tmp_path):
    model, objective, rtd = trained_electra()
    state = objective.state_dict()
    with pytest.raises(CheckpointError, match="generator's head count is not in its weights"):
        export_hf(tmp_path / "bare", model, state)
    with pytest.raises(CheckpointError, match="do not fit the rtd config"):
        export_hf(tmp_path / "wrong", model, state, objective_config=RtdConfig(generator_hidden_size=24))
    export_hf(tmp_path / "out", model, state, objective_config=rtd)
    saved = json.loads((tmp_path / "out" / "generator" / "config.json").read_text())
    assert saved["num_attention_heads"] == 3
    generator = transformers.ElectraForMaskedLM.from_pretrained(tmp_path / "out" / "generator").eval()
    ids, mask, types = batch()
    with torch.no_grad():
        hidden = objective.generator(model.embeddings(ids, types), mask)
        ours = objective.generator.head(hidden, model.input_embeddings.weight)
        theirs = generator(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
    assert max_diff(ours, theirs) <= 1e-5


def test_bert_head_with_another_activation_is_refused(tmp_path):
    model = Bert(BertConfig(vocab_size=VOCAB, hidden_size=36, num_layers=1, num_heads=3, head_act="relu"))
    head = MaskedLanguageModeling(MlmConfig(), model, VOCAB_ROLES).state_dict()
    with pytest.raises(CheckpointError, match="model.head_act=relu: transformers' bert LM head applies gelu"):
        export_hf(tmp_path / "out", model, head)
    export_hf(tmp_path / "bare", model)  # without the head nothing depends on it


def composed(*overrides):
    with initialize_config_module(config_module="plm_toolkit.configs", version_base="1.3"):
        return compose("train", overrides=list(overrides))


@pytest.mark.parametrize("preset", ["transformer_xl_tiny", "xlnet_tiny"])
def test_head_size_lifts_the_divisibility_rule(preset):
    cfg = composed(f"model={preset}", "model.hidden_size=36", "model.num_heads=5", "model.head_size=8")
    assert not [p for p in problems(cfg) if "num_heads" in p]
    cfg = composed(f"model={preset}", "model.hidden_size=36", "model.num_heads=5", "model.head_size=null")
    assert any(
        "model.hidden_size=36 is not divisible by model.num_heads=5; set model.head_size" in p for p in problems(cfg)
    )


def test_xlnet_export_that_transformers_cannot_load_is_refused(tmp_path):
    model = XLNet(XLNetConfig(vocab_size=VOCAB, hidden_size=36, num_layers=1, num_heads=5, head_size=8))
    with pytest.raises(CheckpointError, match="transformers' XLNet requires d_head = d_model / n_head"):
        export_hf(tmp_path / "out", model)
