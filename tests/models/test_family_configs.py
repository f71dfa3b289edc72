"""Every family's config derives from models/base.py's FamilyConfig: the fields every family has (model.checkpoint)
come once, with their meaning, after the family's own, so that a family's keys keep their order."""

import dataclasses

from plm_toolkit.config.reference import field_comments
from plm_toolkit.core.catalog import load_all
from plm_toolkit.core.registry import MODELS
from plm_toolkit.models.base import FamilyConfig


def test_every_family_config_has_the_shared_fields_documented():
    load_all()
    for name in MODELS.names():
        config = MODELS.get(name).config_cls
        assert issubclass(config, FamilyConfig), name
        fields = [f.name for f in dataclasses.fields(config)]
        assert fields.count("checkpoint") == 1 and config().checkpoint is None, name
        assert field_comments(config)["checkpoint"].startswith("plm-train: continue pretraining from these weights")


def test_the_shared_fields_come_after_the_family_own():
    @dataclasses.dataclass
    class Tiny(FamilyConfig):
        # Registry name.
        name: str = "tiny"
        hidden_size: int = 8

    @dataclasses.dataclass
    class Tinier(Tiny):
        extra: int = 1

    assert [f.name for f in dataclasses.fields(Tiny)] == ["name", "hidden_size", "checkpoint"]
    assert [f.name for f in dataclasses.fields(Tinier)] == ["name", "hidden_size", "checkpoint", "extra"]
    assert Tinier(checkpoint="runs/x").checkpoint == "runs/x"
