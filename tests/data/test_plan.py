"""The objective's data plan: layouts resolved from data.packing, and layouts an objective module registers."""

import pytest
from omegaconf import OmegaConf

from plm_toolkit.core.errors import ConfigError
from plm_toolkit.data.build import prepare_pretraining_data
from plm_toolkit.data.layouts.plan import LAYOUT_BUILDERS, DataPlan, choose_layout, register_layout

from .test_encoder_data import bpe_cfg


def test_packing_resolves_against_the_objective_layout():
    packing = lambda value: OmegaConf.create({"packing": value})
    assert choose_layout(packing("auto"), "segment_pairs", "sop") == "segment_pairs"
    assert choose_layout(packing("sentence_pairs"), "full_sentences", "mlm") == "sentence_pairs"
    with pytest.raises(ConfigError, match="data.packing=streams: objective=mlm needs full sentences or pairs"):
        choose_layout(packing("streams"), "full_sentences", "mlm")
    with pytest.raises(ValueError, match="order must be one of"):
        DataPlan(order="sorted")


def test_a_registered_layout_builds_the_examples(tmp_path):
    @register_layout("reversed_documents")
    def build(data_cfg, tokenizer, vocab, plan, split, seed):
        return None if split == "validation" else [{"input_ids": [plan.window, seed]}]

    try:
        data = prepare_pretraining_data(bpe_cfg(tmp_path), DataPlan("reversed_documents", window=7), seed=3)
        assert data.train == [{"input_ids": [7, 3]}] and data.validation is None
        with pytest.raises(ValueError, match="exists already"):
            register_layout("streams")(build)
    finally:
        del LAYOUT_BUILDERS["reversed_documents"]
