"""The speed switches change speed only: packed (unpadded) batches, the gathered MLM head, fused optimizer
kernels and compilation give the losses of the plain path; MFU follows its formula; a failing compiler falls back
with one warning. CUDA-only parts are marked ``gpu`` and skip without a device."""

import logging
import math

import pytest
import torch
from torch import nn

from plm_toolkit.commands.train import run
from plm_toolkit.core.errors import ConfigError
from plm_toolkit.data.batching.collate import target_positions
from plm_toolkit.data.batching.packing import block_diagonal_mask, first_fit, pack_rows
from plm_toolkit.data.batching.shapes import Shapes
from plm_toolkit.data.tokenization.vocab import Vocab
from plm_toolkit.models.bert import Bert, BertConfig
from plm_toolkit.objectives.mlm import MaskedLanguageModeling, MlmConfig
from plm_toolkit.training import compilation
from plm_toolkit.training.flops import ModelFlops, non_embedding_parameters, peak_tflops
from plm_toolkit.training.optim import build_optimizer
from tests.training.conftest import read_metrics, train_records

VOCAB = Vocab(size=97, pad_id=0, unk_id=1, cls_id=2, sep_id=3, mask_id=4)


def tiny_bert() -> Bert:
    config = BertConfig(
        vocab_size=97,
        hidden_size=36,
        num_layers=2,
        num_heads=3,
        intermediate_size=37,
        max_position_embeddings=64,
        hidden_dropout=0.0,
        attention_dropout=0.0,
    )
    return Bert(config).eval()


def masked_batch(objective, lengths: list[int], width: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    rows = len(lengths)
    ids = torch.randint(5, 97, (rows, width), generator=generator)
    mask = (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).long()
    ids[:, 0] = VOCAB.cls_id
    ids[torch.arange(rows), torch.tensor(lengths) - 1] = VOCAB.sep_id
    ids[mask == 0] = VOCAB.pad_id
    special = (ids == VOCAB.cls_id) | (ids == VOCAB.sep_id) | (mask == 0)
    batch = {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}
    batch["special_tokens_mask"] = special
    return objective.batch_transform()(batch, list(range(rows)))


def test_packing_moves_sequences_into_fewer_rows_with_a_block_diagonal_mask():
    ids = torch.tensor([[9, 9, 9, 9, 9, 0, 0, 0], [8, 8, 8, 0, 0, 0, 0, 0], [7] * 7 + [0], [6, 6] + [0] * 6])
    batch = {"input_ids": ids, "attention_mask": (ids != 0).long(), "mlm_labels": torch.where(ids == 8, 1, -100)}
    batch["mlm_positions"] = target_positions(batch["mlm_labels"], 8)
    assert batch["mlm_positions"].tolist() == [8, 9, 10, 32, 32, 32, 32, 32]  # flat, padded with B * T
    packed = pack_rows(batch, budget=lambda rows, width, sequences: 4)
    # First fit, longest first: 7 takes row 0 (one slot left), 5 and 3 share row 1, 2 opens row 2.
    assert packed["input_ids"].tolist() == [[7] * 7 + [0], [9] * 5 + [8] * 3, [6, 6] + [0] * 6]
    assert packed["attention_mask"].sum().item() == 17
    assert packed["position_ids"][1].tolist() == [0, 1, 2, 3, 4, 0, 1, 2]
    assert packed["sequence_ids"][1].tolist() == [1] * 5 + [2] * 3
    assert packed["sequence_ids"][2].tolist() == [1, 1, -3, -4, -5, -6, -7, -8]  # each padding position its own
    mask = block_diagonal_mask(packed["sequence_ids"])[1, 0]
    assert mask[:5, :5].all() and mask[5:, 5:].all() and not mask[:5, 5:].any() and not mask[5:, :5].any()
    pad = block_diagonal_mask(packed["sequence_ids"])[2, 0]
    assert pad[4].tolist() == [False] * 4 + [True] + [False] * 3  # padding attends only to itself
    assert packed["mlm_labels"][1].tolist() == [-100] * 5 + [1, 1, 1]
    assert packed["mlm_positions"].tolist() == [13, 14, 15, 24]  # the budget of 4, padded with R * T
    with pytest.raises(ValueError, match="per-row field 'next_sentence_label'"):
        pack_rows({**batch, "next_sentence_label": torch.zeros(4, dtype=torch.long)})


def packable(lengths: list[int], width: int) -> dict[str, torch.Tensor]:
    mask = (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).long()
    return {"input_ids": mask * 7, "attention_mask": mask}


def test_packing_places_every_token_where_a_row_by_row_copy_does():
    """Random batches of odd sizes: each field's tokens, positions and sequence ids land where copying sequence by
    sequence into the first-fit rows puts them (the scatter replaced that copy)."""
    generator = torch.Generator().manual_seed(5)
    for rows, width in ((13, 37), (31, 64), (1, 9)):
        lengths = torch.randint(1, width + 1, (rows,), generator=generator)
        real = torch.arange(width)[None, :] < lengths[:, None]
        ids = torch.randint(5, 90, (rows, width), generator=generator).masked_fill(~real, 0)
        labels = torch.where(real & (torch.rand(rows, width, generator=generator) < 0.3), ids, -100)
        batch = {"input_ids": ids, "attention_mask": real.long(), "mlm_labels": labels}
        packed = pack_rows(batch, Shapes.compiled(width))
        count = packed["input_ids"].shape[0]
        expected = {key: torch.full((count, width), value[real.logical_not()].flatten()[:1].item()
                                    if not real.all() else 0) for key, value in batch.items()}  # fmt: skip
        positions = torch.zeros(count, width, dtype=torch.long)
        sequences = -torch.arange(1, width + 1).repeat(count, 1)
        for b, members in enumerate(first_fit(lengths.tolist(), width)):
            start = 0
            for n, row in enumerate(members, start=1):
                length = int(lengths[row])
                for key, value in batch.items():
                    expected[key][b, start : start + length] = value[row, :length]
                positions[b, start : start + length] = torch.arange(length)
                sequences[b, start : start + length] = n
                start += length
        for key, value in expected.items():
            assert torch.equal(packed[key], value), key
        assert torch.equal(packed["position_ids"], positions) and torch.equal(packed["sequence_ids"], sequences)


def test_packed_rows_come_in_buckets_of_an_eighth_of_the_batch():
    assert pack_rows(packable([3] * 16, 30))["input_ids"].shape == (2, 30)  # 16 x 3 tokens fill 2 rows of 30
    assert pack_rows(packable([3] * 16, 30), Shapes.compiled(30))["input_ids"].shape == (2, 30)  # 2 = 16 / 8
    # 16 full rows and two short ones need 17 rows; in steps of ceil(18 / 8) = 3 rows that is 18.
    assert pack_rows(packable([3] + [30] * 16 + [3], 30))["input_ids"].shape == (17, 30)
    assert pack_rows(packable([3] + [30] * 16 + [3], 30), Shapes.compiled(30))["input_ids"].shape == (18, 30)
    assert Shapes.compiled(30).rows(3, 32) == 4 and Shapes.compiled(30).rows(17, 32) == 20
    assert Shapes.compiled(30).rows(31, 32) == 32 and Shapes().rows(3, 32) == 3


def test_compiled_widths_round_to_64_but_never_past_the_longest_row():
    shapes = Shapes.compiled(128)
    assert [shapes.width(n) for n in (1, 64, 65, 100, 128, 129)] == [64, 64, 128, 128, 128, 129]
    assert [Shapes.compiled(32).width(n) for n in (5, 32)] == [32, 32]
    assert Shapes.compiled(100).width(70) == 100 and Shapes().width(70) == 70
    assert Shapes.compiled(512).buckets() == 8 and Shapes.compiled(32).capped(200).width(150) == 192


def test_target_budget_bounds_every_batch_of_its_shape():
    objective = MaskedLanguageModeling(MlmConfig(), tiny_bert(), VOCAB)
    masking = objective.masking
    generator = torch.Generator().manual_seed(0)
    for _ in range(30):
        rows = int(torch.randint(1, 9, (1,), generator=generator))
        lengths = torch.randint(3, 41, (rows,), generator=generator).tolist()
        batch = masked_batch(objective, lengths, width=40)
        targets = int((batch["mlm_labels"] != -100).sum())
        assert batch["mlm_positions"].shape == (masking.target_budget(rows, 40, rows),)
        assert targets <= masking.target_budget(rows, 40, rows)
        packed = pack_rows(batch, None, masking.target_budget)
        count, width = packed["input_ids"].shape
        assert int((packed["mlm_positions"] < count * width).sum()) == targets
        assert packed["mlm_positions"].shape == (masking.target_budget(count, width, rows),)


def test_packed_batch_and_gathered_head_give_the_padded_loss():
    torch.manual_seed(0)
    model = tiny_bert()
    objective = MaskedLanguageModeling(MlmConfig(), model, VOCAB).eval()
    batch = masked_batch(objective, [30, 12, 9, 40, 25, 7], width=40)
    plain = {k: v for k, v in batch.items() if k != "mlm_positions"}  # boolean indexing of the targets
    with torch.no_grad():
        reference = objective(model, plain)
        gathered = objective(model, batch)
        packed_batch = pack_rows(batch, None, objective.masking.target_budget)
        packed = objective(model, packed_batch)
    assert packed_batch["input_ids"].shape[0] == 4  # 123 tokens in rows of 40
    for out in (gathered, packed):
        torch.testing.assert_close(out.loss_sums["mlm"], reference.loss_sums["mlm"], atol=1e-4, rtol=1e-5)
        assert out.metrics["mlm_correct"] == reference.metrics["mlm_correct"]


@pytest.mark.slow
def test_cpu_compiled_step_drops_what_the_eager_step_drops(inductor_settings):
    """hardware.compile on a CPU draws dropout's random numbers with ATen's generator (compilation.py): the
    inductor-compiled training step with dropout gives the eager step's loss and gradients for the same seed."""
    from plm_toolkit.training.step import PretrainingModule

    if compilation.compiler_problem(torch.device("cpu")):
        pytest.skip("no working compiler here")
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = Bert(BertConfig(vocab_size=97, hidden_size=36, num_layers=2, num_heads=3, intermediate_size=37,
                            max_position_embeddings=64, hidden_dropout=0.2, attention_dropout=0.2))  # fmt: skip
    module = PretrainingModule(model, MaskedLanguageModeling(MlmConfig(), model, VOCAB)).train()
    batch = masked_batch(module.objective, [30, 12, 40, 25], width=40)

    def step(forward):
        module.zero_grad()
        torch.manual_seed(11)
        loss = forward(batch).loss_sums["mlm"]
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in module.parameters() if p.grad is not None]

    eager_loss, eager_grads = step(module)
    compilation.configure_compiler(torch.device("cpu"))
    compiled_loss, compiled_grads = step(compilation.compile_module(module))
    torch._dynamo.reset()
    torch.testing.assert_close(compiled_loss, eager_loss, rtol=1e-5, atol=1e-5)
    assert len(compiled_grads) == len(eager_grads)
    for compiled, eager in zip(compiled_grads, eager_grads, strict=True):
        torch.testing.assert_close(compiled, eager, rtol=1e-4, atol=1e-5)


def test_unpadded_pretraining_run_matches_the_padded_one(make_config, tmp_path):
    # Sentence lengths vary with data.short_seq_prob=1, so the batches have padding to remove.
    common = [
        "objective=mlm",
        "data.short_seq_prob=1.0",
        "trainer.max_steps=4",
        "model.hidden_dropout=0",
        "model.attention_dropout=0",
    ]
    run(make_config(*common), tmp_path / "padded")
    run(make_config(*common, "hardware.unpad=true"), tmp_path / "unpadded")
    a, b = train_records(tmp_path / "padded"), train_records(tmp_path / "unpadded")
    assert max(abs(x["loss"] - y["loss"]) for x, y in zip(a, b, strict=True)) < 1e-4


def test_unpad_is_refused_where_rows_carry_labels(make_config, tmp_path):
    with pytest.raises(ConfigError, match="hardware.unpad=true packs sequences for objective=mlm"):
        run(make_config("objective=mlm_nsp", "hardware.unpad=true"), tmp_path)


def test_optimizer_kernels_are_fused_on_cpu_and_agree_with_the_loop():
    torch.manual_seed(0)
    models = [nn.Linear(7, 5) for _ in range(3)]
    for m in models[1:]:
        m.load_state_dict(models[0].state_dict())
    cfg = type("Cfg", (), {"name": "adamw", "lr": 1e-2, "betas": [0.9, 0.999], "eps": 1e-6, "weight_decay": 0.01})
    optimizers = [
        build_optimizer(m, cfg, impl) for m, impl in zip(models, ("auto", "foreach", "for_loop"), strict=True)
    ]
    assert optimizers[0].defaults["fused"] and optimizers[1].defaults["foreach"]
    x = torch.randn(4, 7)
    for _ in range(3):
        for m, opt in zip(models, optimizers, strict=True):
            m(x).square().sum().backward()
            opt.step()
            opt.zero_grad()
    for m in models[1:]:
        torch.testing.assert_close(m.weight, models[0].weight, atol=1e-6, rtol=1e-6)


def test_model_flops_and_peaks():
    model = tiny_bert()
    flops = ModelFlops(model, model)
    n = non_embedding_parameters(model)
    embeddings = sum(p.numel() for m in model.modules() if isinstance(m, nn.Embedding) for p in m.parameters())
    assert n == model.num_parameters() - embeddings
    assert flops.per_token(40) == 6 * n + 12 * 2 * 36 * 40
    batch = {"input_ids": torch.zeros(2, 40, dtype=torch.long), "attention_mask": torch.ones(2, 40)}
    batch["attention_mask"][1, 30:] = 0
    assert flops.of_batch(batch) == 70 * flops.per_token(40)
    assert peak_tflops(torch.device("cpu"), "bf16") is None
    assert peak_tflops(torch.device("cpu"), "bf16", override=123.0) == 123.0


def test_mfu_is_logged_against_a_given_peak(make_config, tmp_path):
    run(make_config("trainer.max_steps=2", "hardware.peak_tflops=0.001"), tmp_path)
    record = train_records(tmp_path)[-1]
    assert record["mfu"] > 0 and math.isfinite(record["mfu"])


def test_compile_falls_back_to_eager_with_one_warning(monkeypatch, caplog):
    from torch._dynamo.exc import BackendCompilerFailed

    calls = []

    def broken_compile(module, **kwargs):
        def compiled(*args, **kw):
            calls.append(1)
            error = BackendCompilerFailed.__new__(BackendCompilerFailed)  # its constructor differs across versions
            Exception.__init__(error, "backend='inductor' raised: no working C++ compiler")
            raise error

        return compiled

    monkeypatch.setattr(torch, "compile", broken_compile)
    module = nn.Linear(3, 2)
    forward = compilation.CompiledForward(module)
    x = torch.randn(4, 3)
    with caplog.at_level(logging.WARNING, logger="plm_toolkit"):
        first, second = forward(x), forward(x)
    assert torch.equal(first, module(x)) and torch.equal(second, module(x))
    assert len(calls) == 1 and len([r for r in caplog.records if "torch.compile failed" in r.message]) == 1


def test_compile_without_a_compiler_warns_and_trains(make_config, tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(compilation, "compiler_problem", lambda device: "no C++ compiler (g++, c++ or clang++) on PATH")
    with caplog.at_level(logging.WARNING, logger="plm_toolkit"):
        final = run(make_config("trainer.max_steps=2", "hardware.compile=true"), tmp_path)
    assert final["step"] == 2
    assert [r.message for r in caplog.records if "compile" in r.message] == [
        "hardware.compile=true but no C++ compiler (g++, c++ or clang++) on PATH; training continues without "
        "torch.compile"
    ]


@pytest.mark.gpu
def test_cuda_compiled_unpadded_bf16_run_matches_eager(make_config, tmp_path):
    common = [
        "objective=mlm",
        "data.short_seq_prob=1.0",
        "trainer.max_steps=3",
        "model.hidden_dropout=0",
        "model.attention_dropout=0",
        "hardware=cuda_bf16",
    ]
    run(make_config(*common), tmp_path / "eager")
    run(make_config(*common, "hardware.compile=true", "hardware.unpad=true"), tmp_path / "fast")
    eager, fast = read_metrics(tmp_path / "eager"), read_metrics(tmp_path / "fast")
    assert all("mfu" in r for r in fast)  # a known GPU has a peak in the table
    assert max(abs(x["loss"] - y["loss"]) for x, y in zip(eager, fast, strict=True)) < 0.05


@pytest.mark.gpu
def test_cuda_mlm_head_needs_no_host_sync():
    torch.manual_seed(0)
    model = tiny_bert().cuda().train()
    objective = MaskedLanguageModeling(MlmConfig(), model, VOCAB).cuda()
    batch = {k: v.cuda() for k, v in masked_batch(objective, [30, 12, 9, 40], width=40).items()}
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = objective(model, batch)
        out.loss_sums["mlm"].backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.gpu
def test_cuda_training_step_needs_no_host_sync(make_config, tmp_path):
    from plm_toolkit.data.batching.loader import BatchLayout, MicroBatches
    from tests.commands.test_train import build_trainer

    cfg = make_config("objective=mlm", "hardware=cuda_bf16", "trainer.grad_accum_steps=2")
    trainer, data = build_trainer(cfg, tmp_path)
    t = cfg.trainer
    batching = trainer.batching
    loader = MicroBatches(data.train, BatchLayout(t.batch_size, 2), 0, batching.collate, batching.transform, t.seed)
    micro = [{k: v.pin_memory() for k, v in loader[k].items()} for k in range(4)]
    trainer.train_step(micro[:2])  # the first step allocates optimizer state
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        stats = trainer.train_step(micro[2:])
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert math.isfinite(stats.loss())
