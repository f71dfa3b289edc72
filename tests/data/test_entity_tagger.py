"""Entities tagged by a plm-finetune task=ner checkpoint (objective.entity_tagger), and the checkpoints it refuses."""

from __future__ import annotations

import random
import shutil

import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

import plm_toolkit.commands.finetune as finetune
from plm_toolkit.core.errors import CheckpointError
from plm_toolkit.data.layouts.plan import DataPlan
from plm_toolkit.data.units.corpus import TaggedSources
from plm_toolkit.data.units.store import units_settings
from plm_toolkit.objectives.knowledge_masking import ner_checkpoint
from plm_toolkit.tasks.entity_tagger import EntityTagger, with_entity_tagger
from tests.data.test_units import coded_sentences, sources, units_store
from tests.tasks.conftest import QUIET, save_tiny_checkpoint, tiny_tokenizer

PEOPLE = ["Alice Walker", "Bob", "Carol King", "Dmitri", "Erin Brown", "Farid"]
PLACES = ["Paris", "New York", "London", "Lagos", "Kyoto", "Buenos Aires"]
FILLER = ["went to", "flew to", "lives in", "visited", "wrote about", "returned from"]


def conll_sentences(rng: random.Random, count: int) -> list[list[tuple[str, str]]]:
    out = []
    for _ in range(count):
        person, place = rng.choice(PEOPLE).split(), rng.choice(PLACES).split()
        words = [(w, ("B-" if i == 0 else "I-") + "person") for i, w in enumerate(person)]
        words += [(w, "O") for w in rng.choice(FILLER).split()]
        words += [(w, ("B-" if i == 0 else "I-") + "location") for i, w in enumerate(place)]
        out.append([*words, (".", "O")])
    return out


@pytest.fixture(scope="module")
def ner_run(tmp_path_factory):
    """A tiny BERT fine-tuned for 30 steps on templated sentences whose names and places it can learn."""
    root = tmp_path_factory.mktemp("ner")
    rng = random.Random(0)
    sentences = conll_sentences(rng, 300)
    lines = ["\n".join(f"{w}\t{t}" for w, t in s) + "\n" for s in sentences]
    (root / "train.conll").write_text("\n".join(lines))
    texts = [" ".join(w for w, _ in s) for s in sentences]
    pretrained = save_tiny_checkpoint(root / "pretrained", tiny_tokenizer(texts, vocab_size=200))
    overrides = [
        f"model.checkpoint={pretrained}",
        *QUIET,
        "task=ner",
        f"data.train_file={root / 'train.conll'}",
        "data.max_seq_len=32",
        "model.dropout=0",
        "optimizer.lr=5e-3",
        "optimizer.warmup_ratio=0",
        "trainer.batch_size=16",
        "trainer.max_steps=30",
    ]
    with initialize_config_module(config_module="plm_toolkit.configs", version_base="1.3"):
        cfg = compose("finetune", overrides=overrides)
    finetune.run(cfg, root / "run")
    return root


@pytest.mark.slow
def test_tagger_finds_the_entities_it_learned(ner_run, tmp_path):
    tagger = EntityTagger(ner_run / "run")
    held_out = [["Carol", "King", "returned", "from", "Buenos", "Aires", "."], ["Bob", "visited", "Kyoto", "."], []]
    assert tagger(held_out) == [[(0, 2), (4, 6)], [(0, 1), (2, 3)], []]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("Alice Walker went to Lagos. Farid wrote about New York.\n\nErin Brown lives in Paris.\n")
    tagged = TaggedSources(sources(entity_tagger=str(ner_run / "run"), collocation_passes=0), tagger)
    store = units_store([corpus], tmp_path / "cache", tagger.tokenizer, tagged, num_proc=2)
    assert store.manifest["splits"]["train"]["units"]["entities"] == 6
    assert len(coded_sentences(store)) == 2


@pytest.mark.slow
def test_checkpoints_that_are_not_ner_taggers_are_refused(ner_run, tmp_path):
    folder, labels = ner_checkpoint(ner_run / "run")
    assert "B-location" in labels and labels[0] == "O"
    with pytest.raises(CheckpointError, match=r"objective.entity_tagger=.*pretrained is a pretraining checkpoint"):
        ner_checkpoint(ner_run / "pretrained")
    sst2 = tmp_path / "sst2"
    shutil.copytree(folder, sst2)
    config = OmegaConf.load(sst2 / "config.yaml")
    config.task.name = "sst2"
    OmegaConf.save(config, sst2 / "config.yaml")
    with pytest.raises(CheckpointError, match=r"is a task=sst2 checkpoint; expected a named-entity tagger"):
        ner_checkpoint(sst2)
    with pytest.raises(CheckpointError, match=r"not a plm-finetune checkpoint"):
        ner_checkpoint(tmp_path)
    with pytest.raises(CheckpointError, match=r"no such file or directory"):
        ner_checkpoint(tmp_path / "missing")


@pytest.mark.slow
def test_plm_train_builds_the_tagger_its_objective_names(ner_run):
    """train.py hands data/units/corpus.py the tagger built here (data/ imports nothing from tasks/)."""
    untagged = DataPlan(units=sources())
    assert with_entity_tagger(untagged) is untagged and with_entity_tagger(DataPlan()).units is None
    tagged = with_entity_tagger(DataPlan(units=sources(entity_tagger=str(ner_run / "run")))).units
    assert isinstance(tagged, TaggedSources) and tagged.word_segmenter == "regex"
    assert tagged.tagger([["Bob", "visited", "Kyoto", "."]]) == [[(0, 1), (2, 3)]]
    with pytest.raises(ValueError, match="names a tagger that was not built"):
        units_settings(sources(entity_tagger=str(ner_run / "run"), collocation_passes=0))
