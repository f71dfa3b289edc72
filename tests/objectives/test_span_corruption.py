"""The span_corruption objective: its data plan, its loss on a hand-built batch, its vocabulary checks."""

import pytest
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

from plm_toolkit.core.data_schema import DataConfig
from plm_toolkit.core.errors import ConfigError, DataError
from plm_toolkit.data.tokenization.vocab import Vocab
from plm_toolkit.models.t5 import T5, T5Config
from plm_toolkit.objectives.span_corruption import SpanCorruptionConfig, SpanCorruptionObjective

VOCAB = Vocab(size=97, pad_id=0, eos_id=1, unk_id=2, sentinel_ids=tuple(range(96, 86, -1)))


def model() -> T5:
    torch.manual_seed(0)
    config = T5Config(vocab_size=97, hidden_size=36, head_size=7, num_heads=5, intermediate_size=37, num_layers=2,
                      dropout=0.0, feed_forward="gated_gelu", tie_word_embeddings=False)  # fmt: skip
    return T5(config)


def test_data_plan_reads_windows_that_fill_the_input():
    data = OmegaConf.structured(DataConfig(max_seq_len=512))
    plan = SpanCorruptionObjective.data_plan(SpanCorruptionConfig(), data, T5Config())
    assert (plan.layout, plan.window, plan.stride, plan.order) == ("streams", 568, 568, "shuffled")
    with pytest.raises(ConfigError, match="data.packing=sentence_pairs"):
        SpanCorruptionObjective.data_plan(
            SpanCorruptionConfig(), OmegaConf.merge(data, {"packing": "sentence_pairs"}), T5Config()
        )


def test_loss_is_the_summed_cross_entropy_of_the_targets():
    t5 = model().eval()
    objective = SpanCorruptionObjective(SpanCorruptionConfig(), t5, VOCAB)
    windows = torch.randint(3, 80, (3, 30), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(windows)
    mask[2, 20:] = 0  # a short row: shorter input and targets, padded
    batch = objective.batch_transform()({"input_ids": windows, "attention_mask": mask}, [4, 5, 6])
    out = objective(t5, batch)
    real = batch["labels"] != -100
    assert objective.target_counts(batch) == {"span_corruption": int(real.sum())}
    with torch.no_grad():
        reps = t5(batch["input_ids"], batch["attention_mask"], batch["decoder_input_ids"])
        logits = t5.logits(reps.hidden)[real]
    expected = F.cross_entropy(logits, batch["labels"][real], reduction="sum")
    assert torch.allclose(out.loss_sums["span_corruption"], expected, atol=1e-4)
    assert int(out.metrics["span_corruption_correct"]) == int((logits.argmax(-1) == batch["labels"][real]).sum())


def test_refuses_a_window_with_more_spans_than_sentinels():
    few = Vocab(size=97, pad_id=0, eos_id=1, unk_id=2, sentinel_ids=(96, 95))
    objective = SpanCorruptionObjective(SpanCorruptionConfig(), model(), few)
    windows = torch.randint(3, 80, (1, 60))  # 9 noise tokens in 3 spans
    with pytest.raises(DataError, match="has 3 spans, more than the vocabulary's 2 sentinels"):
        objective.batch_transform()({"input_ids": windows, "attention_mask": torch.ones_like(windows)}, [0])


@pytest.mark.parametrize(
    ("key", "value"), [("noise_density", 0.0), ("noise_density", 1.0), ("mean_noise_span_length", 0.5)]
)
def test_config_checks(key, value):
    with pytest.raises(ConfigError, match=f"objective.{key}="):
        SpanCorruptionObjective.check_config(SpanCorruptionConfig(**{key: value}))
