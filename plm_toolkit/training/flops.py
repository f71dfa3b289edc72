"""Model FLOPs utilization (MFU): the model's FLOPs per second of training over the devices' peak.

FLOPs per token follow Kaplan et al. (2020, section 2.1): 6N for forward and backward through N non-embedding
parameters, plus 12 * layers * width * context for the attention scores and their weighted sum (6 x the 2 * width
* context of the forward pass). Embedding tables, and so a tied vocabulary projection, are left out, as are the
positions that do no work (padding, unmasked tokens under the MLM head), so the figure counts the useful work
of the model and is comparable across implementations that save work differently.
"""

from __future__ import annotations

import torch
from torch import nn

# Dense peak TFLOP/s per device (vendor data sheets, without sparsity), by precision. Matched in order against
# torch.cuda.get_device_name(), so the more specific names come first.
PEAK_TFLOPS: list[tuple[str, dict[str, float]]] = [
    ("H100 PCIe", {"bf16": 756.0, "fp16": 756.0, "tf32": 378.0, "fp32": 51.2}),
    ("H100 NVL", {"bf16": 835.0, "fp16": 835.0, "tf32": 418.0, "fp32": 60.0}),
    ("H100", {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9}),
    ("H200", {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9}),
    ("H800", {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9}),
    ("GH200", {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9}),
    ("B200", {"bf16": 2250.0, "fp16": 2250.0, "tf32": 1100.0, "fp32": 80.0}),
    ("A100", {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5}),
    ("A800", {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5}),
    ("L40S", {"bf16": 362.0, "fp16": 362.0, "tf32": 183.0, "fp32": 91.6}),
    ("L4", {"bf16": 121.0, "fp16": 121.0, "tf32": 60.0, "fp32": 30.3}),
    ("A10", {"bf16": 125.0, "fp16": 125.0, "tf32": 62.5, "fp32": 31.2}),
    ("RTX 4090", {"bf16": 165.2, "fp16": 165.2, "tf32": 82.6, "fp32": 82.6}),
    ("V100", {"fp16": 125.0, "fp32": 15.7}),
    ("T4", {"fp16": 65.0, "fp32": 8.1}),
]


def peak_tflops(device: torch.device, precision: str, allow_tf32: bool = True, override: float = 0.0) -> float | None:
    """Peak dense TFLOP/s of one device for ``precision``; ``override`` > 0 wins; None when unknown (a CPU)."""
    if override > 0:
        return override
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name(device)
    kind = "tf32" if precision == "fp32" and allow_tf32 else precision
    for key, table in PEAK_TFLOPS:
        if key in name:
            return table.get(kind, table.get("fp32"))
    return None


def non_embedding_parameters(module: nn.Module) -> int:
    embeddings = {id(p) for m in module.modules() if isinstance(m, nn.Embedding) for p in m.parameters()}
    return sum(p.numel() for p in module.parameters() if id(p) not in embeddings)


class ModelFlops:
    """FLOPs of one training token: 6N + 12 * layers * width * (row width + carried memory)."""

    def __init__(self, module: nn.Module, model: nn.Module):
        config = getattr(model, "config", None)
        self.dense = 6.0 * non_embedding_parameters(module)
        self.layers = int(getattr(config, "num_layers", 0) or 0)
        self.width = int(getattr(config, "hidden_size", 0) or 0)
        self.memory = int(getattr(config, "mem_len", 0) or 0)

    def per_token(self, context: int) -> float:
        return self.dense + 12.0 * self.layers * self.width * (context + self.memory)

    def of_batch(self, batch: dict[str, torch.Tensor]) -> float:
        """FLOPs of a batch's real (non-padding) tokens, each attending over the row's width."""
        mask = batch.get("attention_mask")
        ids = batch["input_ids"]
        tokens = float(mask.sum()) if mask is not None else float(ids.numel())
        return tokens * self.per_token(int(ids.shape[-1]))
