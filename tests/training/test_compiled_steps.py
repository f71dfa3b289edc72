"""hardware.compile through the real training run: batches come in a few fixed shapes, so over 60 steps each shape
compiles once (the graphs stay within the bucket count) and the step-1 loss is the eager one; unpadded (packed)
batches give the padded loss.

Which graphs dynamo builds and when it recompiles is decided before the backend runs, so these runs use the
``aot_eager`` backend (it traces forward and backward as inductor does, without generating code: seconds instead
of minutes per graph on a CPU); one run goes through inductor itself."""

import logging
import re

import pytest
import torch

from plm_toolkit.commands.train import run
from plm_toolkit.data.batching.shapes import PACKED_ROW_BUCKETS, Shapes
from tests.commands.test_train_t5 import T5
from tests.training.conftest import GPT2_SMALL, QUIET, train_records

NO_DROPOUT = ["model.hidden_dropout=0", "model.attention_dropout=0"]
# Sentence pairs of every length up to 256 tokens, two a batch: batches of several 64-token buckets.
PAIRS = ["data.max_seq_len=256", "model.max_position_embeddings=256", "data.short_seq_prob=1.0", "trainer.batch_size=2"]
CASES = {
    "mlm": (["objective=mlm", "data.packing=sentence_pairs", *PAIRS, *NO_DROPOUT], True, 256),
    "mlm_nsp": (["objective=mlm_nsp", *PAIRS, *NO_DROPOUT], True, 256),
    "clm": ([*GPT2_SMALL, *QUIET, *NO_DROPOUT, "model.embedding_dropout=0"], False, None),
    "span_corruption": ([*T5, "model.dropout=0"], False, None),
}
BUILT = re.compile(r"torch.compile: step (\d+) built (\d+) graph\(s\) for input_ids (\S+) in")


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def compiled_run(make_config, tmp_path, caplog, overrides, tiny, *extra):
    with caplog.at_level(logging.INFO, logger="plm_toolkit"):
        run(make_config(*overrides, *extra, "trainer.eval_every=0", tiny=tiny), tmp_path)
    built = [BUILT.search(r.getMessage()) for r in caplog.records]
    caplog.clear()
    return train_records(tmp_path), [(int(m[1]), int(m[2]), m[3]) for m in built if m]


@pytest.mark.slow
@pytest.mark.parametrize("unpad", [False, True], ids=["padded", "unpadded"])
@pytest.mark.parametrize("name", list(CASES))
def test_sixty_compiled_steps_build_each_shape_once_with_the_eager_loss(make_config, tmp_path, caplog, name, unpad):
    overrides, tiny, longest = CASES[name]
    if unpad and name != "mlm":
        pytest.skip("hardware.unpad packs objective=mlm only")
    eager, _ = compiled_run(make_config, tmp_path / "eager", caplog, overrides, tiny, "trainer.max_steps=1")
    switches = ["hardware.compile=true", "hardware.compile_backend=aot_eager", f"hardware.unpad={str(unpad).lower()}"]
    records, built = compiled_run(make_config, tmp_path / "compiled", caplog, overrides, tiny, "trainer.max_steps=60",
                                  *switches)  # fmt: skip
    shapes = [shape for _, _, shape in built]
    assert shapes and len(shapes) == len(set(shapes)), built  # no shape compiled twice
    widths = Shapes.compiled(longest).buckets() if longest else 1
    assert len(shapes) <= widths * (PACKED_ROW_BUCKETS if unpad else 1)
    assert records[-1]["compiled_graphs"] == sum(graphs for _, graphs, _ in built)
    assert records[-1]["step"] == 60 and records[-1]["compile_s"] > 0
    if name in ("mlm", "mlm_nsp"):  # sentence pairs of every length: several width buckets appear
        widths_seen = {int(shape.split("x")[1]) for shape in shapes}
        assert len(widths_seen) >= 2 and all(width % 64 == 0 for width in widths_seen), shapes
    # Packing changes the order of the sums only.
    tolerance = 1e-4 if unpad else 1e-5
    assert abs(records[0]["loss"] - eager[0]["loss"]) <= tolerance * abs(eager[0]["loss"])


@pytest.mark.slow
def test_inductor_compiles_the_unpadded_mlm_step_once_with_the_padded_eager_loss(make_config, tmp_path, caplog):
    overrides = ["objective=mlm", *NO_DROPOUT]
    eager, _ = compiled_run(make_config, tmp_path / "eager", caplog, overrides, True, "trainer.max_steps=1")
    switches = ["hardware.compile=true", "hardware.unpad=true", "trainer.max_steps=6"]
    records, built = compiled_run(make_config, tmp_path / "compiled", caplog, overrides, True, *switches)
    assert built and len({shape for _, _, shape in built}) == len(built)
    assert abs(records[0]["loss"] - eager[0]["loss"]) <= 1e-4 * abs(eager[0]["loss"])
