"""Validation stays generic: each family names the config fields it range-checks and refuses what it cannot run with,
each objective says whether it reads packed rows; validation asks them through the registry."""

import dataclasses

import pytest

from plm_toolkit.config.checks import model_field_problems
from plm_toolkit.config.resolve import model_class
from plm_toolkit.config.train_checks import problems
from plm_toolkit.core.registry import MODELS
from tests.config.test_compose import composed


@pytest.mark.parametrize("name", MODELS.names())
def test_the_fields_a_family_checks_are_fields_of_its_config(name):
    family = model_class(name)
    declared = family.fields_at_least_zero | family.fields_at_least_one | family.fields_above_zero
    assert declared <= {f.name for f in dataclasses.fields(MODELS.get(name).config_cls)}


@pytest.mark.parametrize(
    ("name", "key", "value", "message"),
    [
        ("elmo", "cell_clip", 0.0, "model.cell_clip=0.0: expected a finite number in (0, inf)"),
        ("elmo", "num_highway", -1, "model.num_highway=-1: must be 0 or positive"),
        ("elmo", "max_characters", 0, "model.max_characters=0: must be at least 1"),
        ("t5", "relative_attention_max_distance", 0, "model.relative_attention_max_distance=0: must be at least 1"),
        ("t5", "initializer_factor", -1.0, "model.initializer_factor=-1.0: expected a finite number in (0, inf)"),
        ("transformer", "num_decoder_layers", 0, "model.num_decoder_layers=0: must be at least 1"),
        ("transformer_xl", "eval_mem_len", -2, "model.eval_mem_len=-2: must be 0 or positive"),
        ("ernie", "task_type_vocab_size", -1, "model.task_type_vocab_size=-1: must be 0 or positive"),
        ("bert", "position_offset", -1, "model.position_offset=-1: must be 0 or positive"),
    ],
)
def test_each_family_range_checks_its_own_fields(name, key, value, message):
    config = dataclasses.asdict(MODELS.get(name).config_cls())
    assert model_field_problems(config) == []
    assert model_field_problems(config | {key: value}) == [message]


def test_a_field_of_one_family_is_not_checked_in_another():
    """mem_len is Transformer-XL's and XLNet's: a config of another family that carried one is not its business."""
    config = dataclasses.asdict(MODELS.get("bert").config_cls())
    assert model_field_problems(config | {"mem_len": -1}) == []
    as_xlnet = config | {"mem_len": -1, "name": "xlnet"}
    assert model_field_problems(as_xlnet) == ["model.mem_len=-1: must be 0 or positive"]


def test_xlnet_refuses_bi_data_with_an_odd_batch():
    cfg = composed("model=xlnet_tiny", "objective=plm", "model.bi_data=true", "trainer.batch_size=5")
    expected = "model.bi_data=true reads half of every batch backwards: trainer.batch_size=5 must be even"
    assert expected in problems(cfg)
    cfg.trainer.batch_size = 6
    assert not [p for p in problems(cfg) if "bi_data" in p]


@pytest.mark.parametrize(("objective", "refused"), [("mlm", False), ("mlm_sop", True), ("knowledge_masking", True)])
def test_unpad_is_offered_to_the_objectives_that_read_packed_rows(objective, refused):
    cfg = composed("model=bert_tiny", f"objective={objective}", "hardware.unpad=true")
    found = [p for p in problems(cfg) if p.startswith("hardware.unpad")]
    expected = (
        "hardware.unpad=true packs sequences for objective=mlm on models that take positions (albert, bert, electra, "
        f"ernie, gpt, gpt2); objective={objective} with model=bert keeps padded rows: set hardware.unpad=false"
    )
    assert found == ([expected] if refused else [])
