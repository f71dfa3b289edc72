"""A compiled training step computes the eager step's gradients, parameter by parameter, and trains as eager does.

On an H200 (torch 2.11) the compiled bert_base and gpt2_small steps of plm-train kept their first loss for 30 steps:
inductor's CUDA code for the traced vocabulary scan (nn/losses.py) returned a zero gradient for the hidden states, so
only the output layer moved. Step-1 losses, which the compiled-run tests compare, cannot show that; gradients can.
Each case is a small backbone with its objective, compiled the way the trainer compiles it (``compile_module``)."""

import copy

import pytest
import torch

from plm_toolkit.data.tokenization.vocab import Vocab
from plm_toolkit.models.bert import Bert, BertConfig
from plm_toolkit.models.electra import Electra, ElectraConfig
from plm_toolkit.models.gpt import GPT, GPT2Config
from plm_toolkit.models.t5 import T5, T5Config
from plm_toolkit.models.transformer_xl import TransformerXL, TransformerXLConfig
from plm_toolkit.models.xlnet import XLNet, XLNetConfig
from plm_toolkit.objectives.clm import CausalLanguageModeling, ClmConfig
from plm_toolkit.objectives.mlm import MaskedLanguageModeling, MlmConfig
from plm_toolkit.objectives.permutation_lm import PermutationLanguageModeling, PlmConfig
from plm_toolkit.objectives.rtd import ReplacedTokenDetection, RtdConfig
from plm_toolkit.objectives.span_corruption import SpanCorruptionConfig, SpanCorruptionObjective
from plm_toolkit.training.compilation import compile_module, configure_compiler
from plm_toolkit.training.step import PretrainingModule

V = 211  # odd sizes throughout
SIZES = {"vocab_size": V, "hidden_size": 36, "num_layers": 2, "num_heads": 3, "intermediate_size": 37}
VOCAB = Vocab(size=V, pad_id=0, unk_id=1, cls_id=2, sep_id=3, mask_id=4, eos_id=5)
T5_VOCAB = Vocab(size=V, pad_id=0, eos_id=1, unk_id=2, sentinel_ids=tuple(range(V - 1, V - 21, -1)))


def padded_rows(rows: int, width: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """[CLS] ... [SEP] rows of random lengths, right-padded, with their special-tokens mask."""
    ids = torch.randint(6, V, (rows, width), generator=generator)
    lengths = torch.randint(width // 2, width + 1, (rows,), generator=generator)
    mask = (torch.arange(width)[None, :] < lengths[:, None]).long()
    ids[:, 0], ids[torch.arange(rows), lengths - 1] = VOCAB.cls_id, VOCAB.sep_id
    ids[mask == 0] = VOCAB.pad_id
    special = (ids == VOCAB.cls_id) | (ids == VOCAB.sep_id) | (mask == 0)
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids),
            "special_tokens_mask": special}  # fmt: skip


def bert_mlm(rows: int, width: int, generator: torch.Generator):
    model = Bert(BertConfig(**SIZES, max_position_embeddings=width, hidden_dropout=0.0, attention_dropout=0.0))
    objective = MaskedLanguageModeling(MlmConfig(), model, VOCAB)
    batch = objective.batch_transform()(padded_rows(rows, width, generator), list(range(rows)))
    return PretrainingModule(model, objective), batch


def gpt2_clm(rows: int, width: int, generator: torch.Generator):
    config = GPT2Config(**SIZES, max_position_embeddings=width, hidden_dropout=0.0, attention_dropout=0.0,
                        embedding_dropout=0.0)  # fmt: skip
    model = GPT(config)
    ids = torch.randint(6, V, (rows, width + 1), generator=generator)
    mask = torch.ones_like(ids)
    mask[0, width // 2 :] = 0  # one shorter row: padding is no target
    batch = {"input_ids": ids.masked_fill(mask == 0, VOCAB.pad_id), "attention_mask": mask}
    return PretrainingModule(model, CausalLanguageModeling(ClmConfig(), model, VOCAB)), batch


def t5_spans(rows: int, width: int, generator: torch.Generator):
    model = T5(T5Config(**SIZES, head_size=12, dropout=0.0))
    objective = SpanCorruptionObjective(SpanCorruptionConfig(), model, T5_VOCAB)
    ids = torch.randint(3, V - 20, (rows, width), generator=generator)
    batch = objective.batch_transform()({"input_ids": ids, "attention_mask": torch.ones_like(ids)}, list(range(rows)))
    return PretrainingModule(model, objective), batch


def electra_rtd(rows: int, width: int, generator: torch.Generator):
    # The generator samples its replacements inside the step: both steps draw from the same seed (loss_and_gradients).
    config = ElectraConfig(**SIZES, max_position_embeddings=width, hidden_dropout=0.0, attention_dropout=0.0)
    model = Electra(config)
    objective = ReplacedTokenDetection(RtdConfig(generator_hidden_fraction=1 / 3), model, VOCAB)
    batch = objective.batch_transform()(padded_rows(rows, width, generator), list(range(rows)))
    return PretrainingModule(model, objective), batch


def xlnet_plm(rows: int, width: int, generator: torch.Generator):
    # Two-stream relative attention over a permutation; each step carries the reused prefix's memory to the next.
    config = XLNetConfig(**SIZES, head_size=11, mem_len=8, hidden_dropout=0.0, attention_dropout=0.0)
    model = XLNet(config)
    objective = PermutationLanguageModeling(PlmConfig(reuse_len=8, perm_size=4), model, VOCAB)
    windows = {"input_ids": torch.randint(6, V, (rows, width - 3), generator=generator)}
    return PretrainingModule(model, objective), objective.batch_transform()(windows, list(range(rows)))


def transformer_xl_clm(rows: int, width: int, generator: torch.Generator):
    # Relative attention over the carried memory of the previous step's segment.
    config = TransformerXLConfig(**SIZES, head_size=11, mem_len=8, hidden_dropout=0.0, attention_dropout=0.0)
    model = TransformerXL(config)
    ids = torch.randint(6, V, (rows, width + 1), generator=generator)
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    return PretrainingModule(model, CausalLanguageModeling(ClmConfig(), model, VOCAB)), batch


CASES = {
    "bert_mlm": bert_mlm,
    "gpt2_clm": gpt2_clm,
    "t5_span_corruption": t5_spans,
    "electra_rtd": electra_rtd,
    "xlnet_plm": xlnet_plm,
    "transformer_xl_clm": transformer_xl_clm,
}


def loss_and_gradients(forward, module, batch, autocast) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    module.zero_grad(set_to_none=True)
    torch.manual_seed(7)  # what a step samples (ELECTRA's replacements) is drawn alike in both
    with autocast:
        out = forward(batch)
    loss = sum(out.loss_sums.values())
    loss.backward()
    return loss.detach().float(), {
        n: p.grad.float().clone() for n, p in module.named_parameters() if p.grad is not None
    }


def losses_over_steps(forward, module, batch, autocast, steps: int) -> list[float]:
    optimizer = torch.optim.AdamW(module.parameters(), lr=3e-3)
    losses = []
    for _ in range(steps):
        loss, _ = loss_and_gradients(forward, module, batch, autocast)
        optimizer.step()
        losses.append(float(loss))
    return losses


def check_compiled_step(name: str, device: torch.device, autocast, loss_tolerance: float, grad_tolerance: float):
    torch._dynamo.reset()
    configure_compiler(device)
    torch.manual_seed(0)
    module, batch = CASES[name](4, 24, torch.Generator().manual_seed(1))
    module = module.to(device).train()
    batch = {k: v.to(device) for k, v in batch.items()}
    twin = copy.deepcopy(module)
    compiled = compile_module(twin)

    eager_loss, eager_grads = loss_and_gradients(module, module, batch, autocast)
    compiled_loss, compiled_grads = loss_and_gradients(compiled, twin, batch, autocast)
    assert torch.allclose(compiled_loss, eager_loss, rtol=loss_tolerance)
    assert compiled_grads.keys() == eager_grads.keys()
    # Relative to the largest gradient of the model: a key bias's is zero in exact arithmetic, rounding noise here.
    scale = max(float(g.abs().max()) for g in eager_grads.values())
    worst = {n: float((compiled_grads[n] - g).abs().max()) / scale for n, g in eager_grads.items()}
    assert max(worst.values()) < grad_tolerance, sorted(worst.items(), key=lambda kv: -kv[1])[:5]
    moved = [n for n, g in eager_grads.items() if float(g.abs().max()) > 1e-3 * scale]
    assert all(float(compiled_grads[n].abs().max()) > 0 for n in moved)

    eager_run = losses_over_steps(module, module, batch, autocast, 6)
    compiled_run = losses_over_steps(compiled, twin, batch, autocast, 6)
    assert compiled_run[-1] < 0.9 * compiled_run[0]  # it learns
    assert compiled_run == pytest.approx(eager_run, rel=10 * loss_tolerance)
    torch._dynamo.reset()


@pytest.mark.parametrize(
    "name", ["bert_mlm", *(pytest.param(name, marks=pytest.mark.slow) for name in list(CASES)[1:])]
)
def test_a_compiled_cpu_step_has_the_eager_gradients_and_learns_alike(name, inductor_settings):
    check_compiled_step(name, torch.device("cpu"), torch.autocast("cpu", enabled=False), 1e-5, 1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(CASES))
def test_a_compiled_cuda_bf16_step_has_the_eager_gradients_and_learns_alike(name, inductor_settings):
    from torch._inductor import config

    # Inductor's CUDA kernels draw their own random numbers (ELECTRA's sampled replacements): ATen's draws here, so
    # that the compiled step samples what the eager one does and only the gradients' arithmetic is compared.
    config.fallback_random = True
    check_compiled_step(name, torch.device("cuda"), torch.autocast("cuda", dtype=torch.bfloat16), 2e-3, 3e-2)
