"""Replaced-token detection (Clark et al. 2020, ELECTRA section 3).

A small generator, trained with MLM, fills the masked positions with tokens sampled from its output distribution;
the backbone (the discriminator) then labels every real position of the corrupted sequence as original or
replaced. The loss is MLM(generator) + ``rtd_weight`` x RTD(discriminator), with lambda = 50 in the paper.

- The generator is this objective's own module: an encoder ``generator_hidden_fraction`` as wide as the backbone
  (section 3.2: 1/4 to 1/2 works best), with as many layers, reading the backbone's embeddings (token, position
  and segment tables and their LayerNorm: "weight sharing", section 3.2) through its own projection E -> H_g when
  the widths differ. Its MLM head decodes with the shared word embedding. Since the embeddings are the backbone's,
  the objective's state holds no copy of them.
- Sampling is not differentiated (section 3: "we do not back-propagate the discriminator loss through the
  generator"); tokens are drawn with the Gumbel-max trick from the device's global generator, which the loop
  reseeds every step, so a resumed run samples the same tokens. Evaluation draws from a fixed seed.
- A sampled token equal to the original counts as original (section 2).

Any bidirectional backbone with BERT-style embeddings can be the discriminator (``model=electra``, ``model=bert``,
``model=albert``); the backbone is what fine-tuning loads, the generator is saved in ``objective.safetensors``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from plm_toolkit.core.errors import ConfigError
from plm_toolkit.core.registry import OBJECTIVES
from plm_toolkit.data.tokenization.vocab import Vocab
from plm_toolkit.models.base import BIDIRECTIONAL
from plm_toolkit.models.bert import BertConfig, BertEncoder, embedding_width
from plm_toolkit.nn.attention import padding_mask
from plm_toolkit.nn.embeddings import TokenEmbeddings
from plm_toolkit.nn.heads import activation, masked_lm_head
from plm_toolkit.nn.init import init_weights
from plm_toolkit.objectives.base import BatchTransform, Objective, ObjectiveOutput
from plm_toolkit.objectives.masking import IGNORE_INDEX, MaskingUnit, check_masking_config, masking_from_config


@dataclass
class RtdConfig:
    # Registry name of the objective.
    name: str = "rtd"
    # Share of each row's maskable tokens that the generator must fill; ELECTRA: 0.15 (0.25 for Large).
    mask_prob: float = 0.15
    # Share of the masked positions shown to the generator as [MASK]; ELECTRA: 0.85 (the rest stay unchanged).
    mask_token_prob: float = 0.85
    # Share shown as a uniformly random token (0 in ELECTRA).
    random_token_prob: float = 0.0
    # Cap on the masked positions per row; null means no cap.
    max_predictions_per_seq: int | None = None
    # Unit of selection: token, whole_word or ngram (see objective=mlm).
    masking: MaskingUnit = MaskingUnit.token
    # Longest n-gram, in words, of masking=ngram.
    max_ngram: int = 3
    # Generator width as a fraction of the backbone's hidden_size (section 3.2; 1/4 for Small and Large, 1/3 for
    # Base); generator_hidden_size overrides it.
    generator_hidden_fraction: float = 0.25
    # Generator width; null means round(generator_hidden_fraction * model.hidden_size).
    generator_hidden_size: int | None = None
    # Generator attention heads; null means max(1, generator width / 64) as in the released code (lowered to a
    # divisor of the width where needed).
    generator_num_heads: int | None = None
    # Generator feed-forward width; null means 4 x the generator width.
    generator_intermediate_size: int | None = None
    # Generator depth; null means model.num_layers.
    generator_num_layers: int | None = None
    # Weight lambda of the discriminator loss (section 3: 50).
    rtd_weight: float = 50.0
    # Temperature of the generator's sampling distribution (1.0: its softmax as is).
    sampling_temperature: float = 1.0
    # plm-train model.checkpoint=<discriminator folder>: the released generator's folder (ElectraForMaskedLM) to
    # continue with it; null reads <model.checkpoint>/generator where that exists, else the generator starts fresh.
    generator_checkpoint: str | None = None


def generator_config(config: RtdConfig, model_config: BertConfig) -> BertConfig:
    """The generator's encoder config: the backbone's, narrower (and optionally shallower)."""
    hidden = config.generator_hidden_size or max(1, round(config.generator_hidden_fraction * model_config.hidden_size))
    heads = config.generator_num_heads or max(1, hidden // 64)
    while config.generator_num_heads is None and hidden % heads:  # the released rule on a width it does not divide
        heads -= 1
    shared = {f.name: getattr(model_config, f.name) for f in dataclasses.fields(BertConfig) if f.name != "name"}
    return BertConfig(
        **shared
        | dict(
            hidden_size=hidden,
            num_heads=heads,
            intermediate_size=config.generator_intermediate_size or 4 * hidden,
            num_layers=config.generator_num_layers or model_config.num_layers,
            embedding_size=embedding_width(model_config),
        )
    )


def rtd_labels(
    input_ids: torch.Tensor,
    mlm_labels: torch.Tensor,
    sampled: torch.Tensor,
    positions: torch.Tensor,
    attention_mask: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The discriminator's input and targets: (corrupted ids (B, T), replaced (B, T) bool).

    ``sampled`` (N,) fills the flat target positions ``positions`` (N,) (``target_positions``: padded with B * T,
    whose samples are dropped). A position is replaced where the corrupted id differs from the original one, so a
    sample equal to the original is "original" (section 2); padding is never replaced.
    """
    targets = mlm_labels != IGNORE_INDEX  # (B, T)
    original = torch.where(targets, mlm_labels, input_ids)  # (B, T)
    flat = F.pad(input_ids.flatten(), (0, 1))  # (B*T + 1,): the last slot takes the padding's samples
    corrupted = flat.scatter(0, positions, sampled.to(flat.dtype))[:-1].view_as(input_ids)  # (B, T)
    return corrupted, (corrupted != original) & attention_mask.bool()


def flat_targets(labels: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """(N,) the batch's flat target positions (the masking transform's ``mlm_positions``), or, for a batch built
    without them, the targets' own positions."""
    positions = batch.get("mlm_positions")
    if positions is None:
        positions = (labels != IGNORE_INDEX).flatten().nonzero().squeeze(1)  # (N,)
    return positions


class Generator(nn.Module):
    """A narrow encoder over the backbone's embeddings, with BERT's MLM head (decoder tied to those embeddings).

    Names follow Hugging Face's ElectraForMaskedLM (``embeddings_project``, ``encoder.layers``, the head's
    ``dense`` / ``layer_norm`` / ``bias``), so ``interop/hf.py`` maps them with its tables.
    """

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        width = embedding_width(config)
        self.embeddings_project = nn.Linear(width, config.hidden_size) if width != config.hidden_size else None
        self.encoder = BertEncoder(config)
        self.head = masked_lm_head(config)
        self.apply(lambda m: init_weights(m, config.initializer_range))

    def forward(self, embedded: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """(B, T, E) shared embeddings -> (B, T, H_g) generator states."""
        x = embedded if self.embeddings_project is None else self.embeddings_project(embedded)  # (B, T, H_g)
        return self.encoder(x, padding_mask(attention_mask), None)


class DiscriminatorHead(nn.Module):
    """dense -> activation -> one logit per position (HF's ``discriminator_predictions``)."""

    def __init__(self, hidden_size: int, hidden_act: str):
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.act = activation(hidden_act)
        self.prediction = nn.Linear(hidden_size, 1)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.prediction(self.act(self.dense(hidden))).squeeze(-1)  # (..., T)


def gumbel_sample(logits: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One id per row of (N, V) logits, distributed as softmax(logits): argmax(logits + Gumbel noise)."""
    uniform = torch.rand(logits.shape, device=logits.device, generator=generator, dtype=torch.float32)
    gumbel = -torch.log(-torch.log(uniform.clamp(1e-9, 1.0 - 1e-7)))
    return (logits.float() + gumbel).argmax(dim=-1)


@OBJECTIVES.register("rtd", RtdConfig)
class ReplacedTokenDetection(Objective):
    """Generator MLM + weighted discriminator RTD; metric sums ``mlm_correct`` (generator) and ``rtd_correct``
    (discriminator, over all real positions), logged as accuracies."""

    perplexity_components = frozenset({"mlm"})

    required_capabilities = frozenset({BIDIRECTIONAL})
    metric_denominators = {"mlm_correct": "mlm", "rtd_correct": "rtd"}

    def __init__(self, config: RtdConfig, model: nn.Module, vocab: Vocab):
        super().__init__()
        self.check_config(config)
        if not isinstance(getattr(model, "embeddings", None), TokenEmbeddings):
            raise ConfigError(
                f"objective=rtd shares the backbone's token embeddings; model={model.config.name} has none to share"
            )
        self.generator = Generator(generator_config(config, model.config))
        self.discriminator_head = DiscriminatorHead(model.config.hidden_size, model.config.hidden_act)
        self.discriminator_head.apply(lambda m: init_weights(m, model.config.initializer_range))
        self.masking = masking_from_config(config, vocab)
        self.rtd_weight = config.rtd_weight
        self.temperature = config.sampling_temperature

    @classmethod
    def check_config(cls, config) -> None:
        check_masking_config(config)
        if not 0.0 < config.generator_hidden_fraction <= 1.0:
            raise ConfigError(
                f"objective.generator_hidden_fraction must lie in (0, 1], got {config.generator_hidden_fraction}"
            )
        hidden, heads = config.generator_hidden_size, config.generator_num_heads
        if hidden is not None and heads is not None and hidden % heads:
            raise ConfigError(
                f"objective.generator_hidden_size={hidden} is not divisible by objective.generator_num_heads={heads}"
            )
        if config.rtd_weight < 0:
            raise ConfigError(f"objective.rtd_weight must be at least 0, got {config.rtd_weight}")
        if config.sampling_temperature <= 0:
            raise ConfigError(f"objective.sampling_temperature must be positive, got {config.sampling_temperature}")

    def batch_transform(self) -> BatchTransform:
        return self.masking

    def target_counts(self, batch: dict[str, torch.Tensor]) -> dict[str, int]:
        return {"mlm": int((batch["mlm_labels"] != IGNORE_INDEX).sum()), "rtd": int(batch["attention_mask"].sum())}

    def generator_logits(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """(N, V) generator logits at the N flat target positions of a masked batch (padded slots included)."""
        embedded = model.embeddings(batch["input_ids"], batch.get("token_type_ids"))  # (B, T, E): shared
        hidden = self.generator(embedded, batch["attention_mask"]).flatten(0, 1)  # (B*T, H_g)
        positions = flat_targets(batch["mlm_labels"], batch)
        picked = hidden.index_select(0, positions.clamp(max=hidden.shape[0] - 1))  # (N, H_g)
        return self.generator.head(picked, model.input_embeddings.weight)  # (N, V)

    def forward(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        labels, mask = batch["mlm_labels"], batch["attention_mask"]
        positions = flat_targets(labels, batch)
        logits = self.generator_logits(model, batch)
        gold = F.pad(labels.flatten(), (0, 1), value=IGNORE_INDEX).gather(0, positions)  # (N,), pads ignored
        mlm_sum = F.cross_entropy(logits, gold, reduction="sum", ignore_index=IGNORE_INDEX)
        with torch.no_grad():
            # Evaluation samples from a fixed seed, so that it neither depends on nor disturbs the training stream.
            generator = None
            if not self.training:
                generator = torch.Generator(logits.device).manual_seed(0)
            sampled = gumbel_sample(logits.detach() / self.temperature, generator)  # (N,)
        corrupted, replaced = rtd_labels(batch["input_ids"], labels, sampled, positions, mask)
        inputs = {"input_ids": corrupted, "attention_mask": mask}
        if "token_type_ids" in batch:
            inputs["token_type_ids"] = batch["token_type_ids"]
        scores = self.discriminator_head(model(**inputs).hidden)  # (B, T)
        # Every real position is a target, [CLS] and [SEP] included, as in the paper's code; padding weighs 0.
        real = mask.bool()
        weight = real.to(scores.dtype)
        rtd_sum = F.binary_cross_entropy_with_logits(scores, replaced.to(scores.dtype), weight, reduction="sum")
        return ObjectiveOutput(
            loss_sums={"mlm": mlm_sum, "rtd": self.rtd_weight * rtd_sum},
            metrics={
                "mlm_correct": ((logits.detach().argmax(dim=-1) == gold) & (gold != IGNORE_INDEX)).sum(),
                "rtd_correct": (((scores.detach() > 0) == replaced) & real).sum(),
            },
        )
