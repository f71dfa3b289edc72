"""The objective's data plan: layouts resolved from data.packing, and layouts an objective module registers."""

import pytest
from omegaconf import OmegaConf

from plm_toolkit.core.errors import ConfigError
from plm_toolkit.data.build import prepare_pretraining_data
from plm_toolkit.data.layouts.examples import PretrainingData
from plm_toolkit.data.layouts.plan import DataPlan, Layout
from plm_toolkit.data.layouts.registry import LAYOUTS, LayoutSpec, choose_layout, layout_of, register_layout
from plm_toolkit.data.tokenization.tokenizer import load_or_train_tokenizer, vocab_from_tokenizer
from tests.data.layouts.test_encoder_data import bpe_cfg


def test_packing_resolves_against_the_objective_layout():
    packing = lambda value: OmegaConf.create({"packing": value})
    assert choose_layout(packing("auto"), "segment_pairs", "sop") == "segment_pairs"
    assert choose_layout(packing("sentence_pairs"), "full_sentences", "mlm") == "sentence_pairs"
    with pytest.raises(ConfigError, match="data.packing=streams: objective=mlm needs full sentences or pairs"):
        choose_layout(packing("streams"), "full_sentences", "mlm")
    with pytest.raises(ValueError, match="order must be one of"):
        DataPlan(order="sorted")


def test_a_registered_layout_prepares_the_data(tmp_path):
    def prepare(data_cfg, plan, seed):
        tokenizer = load_or_train_tokenizer(data_cfg)
        vocab = vocab_from_tokenizer(tokenizer)
        return PretrainingData(tokenizer, vocab, [{"input_ids": [plan.window, seed, vocab.size]}], None)

    register_layout("reversed_documents", LayoutSpec("reversed documents", prepare=prepare, stored=False))
    try:
        data = prepare_pretraining_data(bpe_cfg(tmp_path), DataPlan("reversed_documents", window=7), seed=3)
        assert data.train == [{"input_ids": [7, 3, data.vocab.size]}] and data.validation is None
        with pytest.raises(ValueError, match="exists already"):
            register_layout("streams", LayoutSpec("streams", prepare=prepare))
        with pytest.raises(ValueError, match="layout must be one of .*'reversed_documents'"):
            layout_of("reversed")
    finally:
        del LAYOUTS["reversed_documents"]


def test_every_layout_is_prepared_by_the_registry():
    """Each of the objectives' layouts is registered, a store layout with the unit the token store holds for it."""
    assert set(LAYOUTS) >= {layout.value for layout in Layout}
    units = {name: spec.unit for name, spec in LAYOUTS.items() if spec.examples is not None}
    assert units == {"streams": "documents", "full_sentences": "document_sentences", "sentence_pairs": "sentences",
                     "segment_pairs": "sentences", "sentence_streams": "sentences"}  # fmt: skip
    assert [name for name, spec in LAYOUTS.items() if spec.parallel_text] == ["parallel"]
