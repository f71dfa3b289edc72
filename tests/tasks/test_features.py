"""finetune.mode=features: the backbone stays frozen, a scalar mix + biLSTM learns; full mode is unchanged."""

import pytest
import torch
from safetensors.torch import load_file

from plm_toolkit.commands.finetune import run
from plm_toolkit.core import checkpoint as ckpt
from plm_toolkit.interop.pretrained import load_backbone
from tests.tasks.conftest import SST2_DEV, SST2_TRAIN
from tests.training.conftest import read_metrics

FAST = ["optimizer.lr=1e-2", "optimizer.warmup_ratio=0", "trainer.batch_size=16"]
FEATURES = [
    "finetune.mode=features",
    "finetune.encoder_hidden_size=24",
    "finetune.encoder_layers=1",
    "finetune.dropout=0",
]


def losses(run_dir):
    return [r["loss"] for r in read_metrics(run_dir) if "lr" in r]


@pytest.mark.slow
def test_features_mode_trains_only_the_task_encoder(finetune_config, tiny_checkpoint, tmp_path):
    cfg = finetune_config(
        f"data.train_file={SST2_TRAIN}",
        f"data.validation_file={SST2_DEV}",
        "data.max_seq_len=40",
        "data.max_train_samples=32",
        "data.max_eval_samples=50",
        "trainer.max_steps=40",
        *FAST,
        *FEATURES,
    )
    run(cfg, tmp_path)
    values = losses(tmp_path)
    assert sum(values[-5:]) / 5 < sum(values[:5]) / 5 - 0.2, values
    before = load_file(str(tiny_checkpoint / ckpt.MODEL_FILE))
    after = load_file(str(tmp_path / "checkpoints" / "last" / ckpt.MODEL_FILE))
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)  # the backbone never moved
    head = load_file(str(tmp_path / "checkpoints" / "last" / ckpt.OBJECTIVE_FILE))
    mix = torch.softmax(head["features.mix.weights"], dim=0)
    assert mix.shape == (3,) and abs(float(mix.sum()) - 1) < 1e-6  # embeddings + 2 layers, mixed
    assert not torch.allclose(mix, torch.full((3,), 1 / 3))  # and learned
    assert "features.lstm.weight_ih_l0" in head and head["head.linear.weight"].shape[1] == 48
    # The fine-tuned checkpoint still loads as a backbone (the frozen one).
    assert load_backbone(tmp_path / "checkpoints" / "last").model.config.hidden_size == 36


def test_features_mode_reads_every_layer_without_gradients(finetune_config, tiny_checkpoint, tmp_path):
    from plm_toolkit.core.command_schema import FinetuneModeConfig
    from plm_toolkit.tasks.base import PadCollator, TaskData
    from plm_toolkit.tasks.classification import ClassificationConfig, SequenceClassification

    loaded = load_backbone(tiny_checkpoint)
    model = loaded.model.train()
    data = TaskData([{"input_ids": [2, 7, 9, 3], "token_type_ids": [0] * 4, "labels": 1}], None, labels=["0", "1"])
    config = FinetuneModeConfig(mode="features", encoder_hidden_size=8, encoder_layers=1, dropout=0.0)
    task = SequenceClassification(ClassificationConfig(), model, None, data, finetune=config)
    assert not any(p.requires_grad for p in model.parameters())
    batch = PadCollator(0)(data.train * 2)
    out = task(model, batch)
    out.loss_sums["task"].backward()
    assert model.training  # the backbone's mode is restored after it ran in eval mode
    assert task.features.mix.weights.grad is not None and task.head.linear.weight.shape == (2, 16)


@pytest.fixture(scope="module")
def tiny_elmo_folder(tmp_path_factory):
    """A random tiny ELMo in bilm-tf's format (options.json + weights.hdf5), as released ELMo models come."""
    pytest.importorskip("h5py")
    from plm_toolkit.interop.elmo_bilm_tf import export_bilm_tf
    from plm_toolkit.models.elmo import Elmo, ElmoConfig

    torch.manual_seed(0)
    config = ElmoConfig(
        char_embedding_size=4, filters=[[1, 8], [2, 8], [3, 8]], num_highway=1, hidden_size=12, cell_size=20
    )
    return export_bilm_tf(tmp_path_factory.mktemp("elmo"), Elmo(config))


def test_elmo_features_carry_the_spelling_of_unknown_words(tiny_elmo_folder, tmp_path):
    from omegaconf import OmegaConf

    from plm_toolkit.data.tokenization.characters import word_character_ids
    from plm_toolkit.data.tokenization.tokenizer import vocab_from_tokenizer
    from plm_toolkit.tasks.ner import NerConfig, TokenClassification

    (tmp_path / "train.conll").write_text("Zyzzyva\tB-PER\nran\tO\n")
    data_cfg = OmegaConf.create(
        {"train_file": str(tmp_path / "train.conll"), "validation_file": None, "max_seq_len": 16}
        | {"max_train_samples": None, "max_eval_samples": None}
    )
    loaded = load_backbone(tiny_elmo_folder)
    vocab = vocab_from_tokenizer(loaded.tokenizer)
    data = TokenClassification.prepare_data(NerConfig(), data_cfg, loaded.tokenizer, vocab, characters=50)
    feature = data.train[0]
    assert feature["input_ids"] == [vocab.bos_id, vocab.unk_id, vocab.unk_id, vocab.eos_id]  # no word is known
    assert feature["char_ids"] == [word_character_ids(w) for w in ("<S>", "Zyzzyva", "ran", "</S>")]
    assert feature["labels"][1] == 1 and feature["labels"][0] == -100  # B-PER on the word, none on <S>


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["full", "features"])
def test_elmo_fine_tunes_on_ner_fully_and_as_features(finetune_config, tiny_elmo_folder, tmp_path, mode):
    sentence = "EU\tB-ORG\nrejects\tO\nGerman\tB-MISC\ncall\tO\n\nPeter\tB-PER\nBlackburn\tI-PER\nwent\tO\n\n"
    (tmp_path / "train.conll").write_text(sentence * 12)
    (tmp_path / "dev.conll").write_text(sentence)
    cfg = finetune_config(
        f"model.checkpoint={tiny_elmo_folder}",
        f"data.train_file={tmp_path / 'train.conll'}",
        f"data.validation_file={tmp_path / 'dev.conll'}",
        "task=ner",
        "model.dropout=0",
        "trainer.max_steps=60",
        "trainer.batch_size=8",
        "optimizer.lr=2e-2",
        "optimizer.warmup_ratio=0",
        f"finetune.mode={mode}",
        "finetune.encoder_hidden_size=16",
        "finetune.encoder_layers=1",
        "finetune.dropout=0",
    )
    final = run(cfg, tmp_path / "run")
    values = losses(tmp_path / "run")
    assert sum(values[-5:]) / 5 < sum(values[:5]) / 5 - 0.5, values
    assert final["eval_accuracy"] > 3 / 7  # above tagging every word O
