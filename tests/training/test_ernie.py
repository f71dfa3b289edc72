"""plm-train model=ernie end to end: knowledge masking's loss falls, resume is exact across a stage boundary, task
types train, and impossible settings stop at validation."""

import pytest
import torch
from safetensors.torch import load_file

from plm_toolkit.commands.train import run
from plm_toolkit.config.validate import validate
from plm_toolkit.core.errors import ConfigError

from .conftest import read_metrics

ERNIE = ["model=ernie", "model.hidden_size=36", "model.num_heads=3", "model.intermediate_size=37"]
NAMES = ["Du Fu", "Li Bai", "One Direction", "Robert Boulter", "Ben Whishaw", "New Zealand", "United States"]


@pytest.fixture
def gazetteer(tmp_path):
    path = tmp_path / "gazetteer.txt"
    path.write_text("".join(f"{name}\n" for name in NAMES))
    return path


def train_losses(run_dir):
    return [r for r in read_metrics(run_dir) if "lr" in r]


@pytest.mark.slow
def test_knowledge_masking_loss_falls(make_config, tmp_path, gazetteer):
    cfg = make_config(
        *ERNIE,
        f"objective.entity_gazetteer={gazetteer}",
        "trainer.max_steps=60",
        "optimizer.lr=3e-3",
        "trainer.save_every=0",
    )
    assert cfg.objective.name == "knowledge_masking" and cfg.objective.total_steps == 60
    run(cfg, tmp_path / "run")
    train = train_losses(tmp_path / "run")
    assert {"loss", "mlm_accuracy"} <= set(train[0])
    first, last = sum(r["loss"] for r in train[:5]) / 5, sum(r["loss"] for r in train[-5:]) / 5
    assert last < first - 0.3, (first, last)


def test_resume_is_exact_across_a_stage_boundary(make_config, tmp_path, gazetteer):
    """Stages start at steps 2 (phrases) and 4 (entities); the run stops at step 3 and resumes to 8."""
    common = [
        *ERNIE,
        f"objective.entity_gazetteer={gazetteer}",
        "objective.stage_fractions=[0.25,0.25,0.5]",
        "objective.total_steps=8",
        "trainer.save_every=3",
        "optimizer.total_steps=8",
        "trainer.seed=5",
        "optimizer.lr=2e-3",
    ]
    straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"
    run(make_config(*common, "trainer.max_steps=8"), straight)
    run(make_config(*common, "trainer.max_steps=3"), interrupted)
    run(make_config(*common, "trainer.max_steps=8"), interrupted)
    a, b = train_losses(straight), train_losses(interrupted)
    assert [r["step"] for r in b] == list(range(1, 9))
    assert [(r["loss"], r["mlm_accuracy"]) for r in a] == [(r["loss"], r["mlm_accuracy"]) for r in b]
    for name in ("model.safetensors", "objective.safetensors"):
        wa = load_file(straight / "checkpoints" / "last" / name)
        wb = load_file(interrupted / "checkpoints" / "last" / name)
        assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa), name


def test_task_types_and_whole_word_baseline_train(make_config, tmp_path):
    cfg = make_config(*ERNIE, "model.use_task_id=true", "model.task_type_vocab_size=3", "objective.masking=whole_word")
    cfg.trainer.max_steps = 2
    run(cfg, tmp_path)
    assert [r["step"] for r in train_losses(tmp_path)] == [1, 2]
    weights = load_file(tmp_path / "checkpoints" / "last" / "model.safetensors")
    assert weights["embeddings.task_type_embeddings.weight"].shape == (3, 36)
    # plm-export writes the run as ErnieForMaskedLM, which transformers loads whole.
    transformers = pytest.importorskip("transformers")
    from plm_toolkit.commands.export import export_checkpoint

    export_checkpoint(tmp_path, tmp_path / "hf")
    model, info = transformers.ErnieForMaskedLM.from_pretrained(tmp_path / "hf", output_loading_info=True)
    assert not info["missing_keys"] and not info["mismatched_keys"]
    assert model.config.use_task_id and model.config.task_type_vocab_size == 3


@pytest.mark.parametrize(
    "overrides,expected",
    [
        (["data.packing=sentence_pairs"], "objective=knowledge_masking reads full sentences"),
        (["objective=mlm", "objective.masking=knowledge"], "objective.masking=knowledge needs objective=knowledge_m"),
        (
            ["objective.entity_gazetteer=/no/such/gazetteer.txt"],
            "objective.entity_gazetteer=/no/such/gazetteer.txt: no",
        ),
        (["objective.stage_fractions=[0.5,0.5]"], "objective.stage_fractions=\\[0.5, 0.5\\]: expected three shares"),
        (["model.task_type_vocab_size=0"], "model.task_type_vocab_size=0: must be at least 1"),
    ],
)
def test_impossible_settings_stop_at_validation(make_config, overrides, expected):
    with pytest.raises(ConfigError, match=expected):
        validate(make_config(*ERNIE, *overrides))


def test_an_entity_tagger_that_is_not_ner_stops_at_validation(make_config, tmp_path):
    """A pretraining checkpoint named as objective.entity_tagger is refused before any work."""
    pretrain = tmp_path / "pretrain"
    run(make_config("trainer.max_steps=1"), pretrain)
    with pytest.raises(ConfigError, match=r"objective.entity_tagger=.* is a pretraining checkpoint \(no task\)"):
        validate(make_config(*ERNIE, f"objective.entity_tagger={pretrain}"))


CHINESE = [
    "北京是中华人民共和国的首都，也是全国的政治和文化中心。",
    "长江是中国最长的河流，流经青海、四川、湖北和上海等地。",
    "李白是唐代著名的诗人，他的诗歌想象丰富，语言优美。",
    "杜甫与李白齐名，被后人称为诗圣。",
    "上海是中国最大的城市之一，也是重要的经济中心。",
    "我们今天在图书馆学习自然语言处理的基础知识。",
]


@pytest.mark.parametrize("masking", ["knowledge", "whole_word"])
def test_a_chinese_corpus_trains_with_jieba_words(make_config, tmp_path, masking):
    """ERNIE's masking (characters, then words and phrases) and Chinese BERT-wwm's (whole jieba words)."""
    pytest.importorskip("jieba")
    corpus = tmp_path / "zh.txt"
    corpus.write_text("\n\n".join("".join(CHINESE[i:] + CHINESE[:i]) for i in range(len(CHINESE))) + "\n")
    cfg = make_config(
        *ERNIE,
        f"data.train_files=[{corpus}]",
        "data.validation_files=[]",
        "data.tokenizer.vocab_size=300",
        "objective.word_segmenter=jieba",
        "objective.basic_unit=token",
        f"objective.masking={masking}",
        "objective.collocation_min_count=3",
        "trainer.max_steps=2",
    )
    run(cfg, tmp_path / "run")
    assert [r["step"] for r in train_losses(tmp_path / "run")] == [1, 2]
