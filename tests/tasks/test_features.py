"""finetune.mode=features: the backbone stays frozen, a scalar mix + biLSTM learns; full mode is unchanged."""

import pytest
import torch
from safetensors.torch import load_file

from plm_toolkit.finetune import run
from plm_toolkit.models.pretrained import load_backbone
from plm_toolkit.training import checkpoint as ckpt
from tests.training.conftest import read_metrics

from .conftest import SST2_DEV, SST2_TRAIN

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
    from plm_toolkit.config.schema import FinetuneModeConfig
    from plm_toolkit.tasks.base import PadCollator, TaskData
    from plm_toolkit.tasks.glue import ClassificationConfig, SequenceClassification

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
