"""Translation: teacher-forced cross-entropy with label smoothing over an encoder-decoder, evaluated by decoding.

Training feeds the decoder the target shifted right behind the model's start token and predicts every target token
and the end token (Vaswani et al. 2017, section 3), with label smoothing eps = 0.1 (section 5.4; the convention is
``nn/losses.py``'s). Logged: ``loss`` (smoothed, per target token), ``translation_nll`` (plain cross-entropy per
token, what perplexity and model comparisons read) and ``translation_accuracy``.

Evaluation also decodes the validation sources with beam search (beam 4, GNMT alpha 0.6, max length source + 50,
``plm_toolkit/generation/decoding.py``) and scores the detokenized output against the references with sacrebleu:
``eval_bleu`` and ``eval_chrf`` in metrics.jsonl, and at the end of the run ``eval_results.json`` with both and
their sacrebleu signatures, and ``translations.txt`` (one hypothesis per validation pair, in file order).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from tokenizers import Tokenizer
from torch import nn

from plm_toolkit.config.checks import decoding_problems
from plm_toolkit.core.errors import ConfigError
from plm_toolkit.core.registry import OBJECTIVES
from plm_toolkit.data.batching.collate import IGNORE_INDEX, Seq2SeqCollator, shift_right
from plm_toolkit.data.layouts.plan import Layout
from plm_toolkit.data.tokenization.vocab import Vocab
from plm_toolkit.generation.decoding import SearchConfig, generate
from plm_toolkit.generation.text_metrics import bleu_chrf
from plm_toolkit.models.base import ENCODER_DECODER
from plm_toolkit.nn.losses import label_smoothed_cross_entropy
from plm_toolkit.objectives.base import Objective, ObjectiveOutput

log = logging.getLogger("plm_toolkit")


@dataclass
class TranslationConfig:
    # Registry name of the objective.
    name: str = "translation"
    # Label smoothing eps: the target distribution puts 1 - eps on the reference token and eps spread evenly over
    # the whole vocabulary (Szegedy et al. 2016; the paper: 0.1). 0 is plain cross-entropy.
    label_smoothing: float = 0.1
    # Decode the validation set at every evaluation and report eval_bleu / eval_chrf (sacrebleu); false reports
    # the teacher-forced losses only (faster).
    decode: bool = True
    # Beam size of evaluation decoding; 1 decodes greedily (the paper: 4).
    num_beams: int = 4
    # GNMT length penalty alpha of beam search (the paper: 0.6).
    length_penalty: float = 0.6
    # Output length limit: max_length_a * source length + max_length_b tokens (the paper: 1 and 50).
    max_length_a: float = 1.0
    # The b of the length limit: tokens allowed beyond max_length_a * source length.
    max_length_b: int = 50
    # sacrebleu's BLEU tokenizer (13a is its default and WMT's; intl, zh, ja-mecab, ... for other scripts).
    bleu_tokenize: str = "13a"


def check_decoding(config, prefix: str) -> None:
    """ConfigError naming the key for an impossible decoding setting (``prefix``: objective or task)."""
    found = decoding_problems(config, f"{prefix}.")
    if found:
        raise ConfigError("; ".join(found))


def search_config(config, eos_id: int) -> SearchConfig:
    """Beam search as the config asks: max_length_a x source length + max_length_b tokens at most."""
    return SearchConfig(
        max_new_tokens=config.max_length_b,
        max_length_a=config.max_length_a,
        num_beams=config.num_beams,
        length_penalty=config.length_penalty,
        eos_id=eos_id,
    )


def decode(model: nn.Module, batch: dict[str, torch.Tensor], search: SearchConfig) -> list[list[int]]:
    """The best output of every source of the batch, as token ids without the end token."""
    outputs = generate(model.decoder(model.logits), batch["input_ids"], batch["attention_mask"], search)
    return [o[:-1] if o and o[-1] == search.eos_id else o for o in outputs]


def flatten_outputs(outputs: list[list[int]], index: torch.Tensor) -> dict[str, torch.Tensor]:
    """Decoded sentences of a batch as flat tensors the loop can concatenate over batches and processes."""
    return {
        "index": index,
        "length": torch.tensor([len(o) for o in outputs], dtype=torch.long),
        "tokens": torch.tensor([t for o in outputs for t in o], dtype=torch.long),
    }


def unflatten_outputs(outputs: dict[str, torch.Tensor]) -> dict[int, list[int]]:
    """Row index -> decoded token ids, from what ``flatten_outputs`` returned for every batch."""
    pieces = torch.split(outputs["tokens"], outputs["length"].tolist())
    return {int(i): p.tolist() for i, p in zip(outputs["index"], pieces, strict=True)}


def teacher_forced(
    model: nn.Module, batch: dict[str, torch.Tensor], pad_id: int, epsilon: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(label-smoothed loss sum, NLL sum, correct predictions) of predicting ``labels`` with the decoder fed the
    labels shifted right behind the model's start token; padded positions are never scored."""
    labels = batch["labels"]  # (B, T)
    decoder_input_ids = shift_right(labels, model.decoder_start_token_id, pad_id)
    reps = model(batch["input_ids"], batch["attention_mask"], decoder_input_ids)
    keep = labels != IGNORE_INDEX  # (B, T)
    logits = model.logits(reps.hidden[keep])  # (N, V): only the real target positions
    gold = labels[keep]  # (N,)
    loss_sum, nll_sum = label_smoothed_cross_entropy(logits, gold, epsilon)
    return loss_sum, nll_sum, (logits.detach().argmax(dim=-1) == gold).sum()


@OBJECTIVES.register("translation", TranslationConfig)
class Translation(Objective):
    required_capabilities = frozenset({ENCODER_DECODER})
    natural_layout = Layout.parallel
    compile_refusal = (
        "translation's token batches (data.max_tokens) change rows and widths from batch to batch, so a compiled "
        "step would build a graph for nearly every batch"
    )
    metric_denominators = {"translation_nll": "translation", "translation_correct": "translation"}

    def __init__(self, config: TranslationConfig, model: nn.Module, vocab: Vocab):
        super().__init__()
        self.config = config
        self.pad_id = vocab.padding_id
        self.search = search_config(config, vocab.require("eos_id", "objective=translation"))
        self.tokenizer: Tokenizer | None = None
        self.references: list[str] = []
        # What the last evaluation produced, for eval_results.json and translations.txt.
        self.last_metrics: dict = {}
        self.artifacts: dict = {}

    @classmethod
    def check_config(cls, config) -> None:
        if not 0.0 <= config.label_smoothing < 1.0:
            raise ConfigError(f"objective.label_smoothing={config.label_smoothing}: expected a value in [0, 1)")
        check_decoding(config, "objective")

    def attach_references(self, tokenizer: Tokenizer, references: list[str]) -> None:
        """The tokenizer that detokenizes decoded ids and the validation targets BLEU compares them with."""
        self.tokenizer, self.references = tokenizer, list(references)

    def collator(self, vocab: Vocab) -> Seq2SeqCollator:
        """Source rows for the encoder, target rows as labels, each ended by the end-of-sentence token."""
        return Seq2SeqCollator(vocab.padding_id, vocab.require("eos_id", "translation"))

    def target_counts(self, batch: dict[str, torch.Tensor]) -> dict[str, int]:
        return {"translation": int((batch["labels"] != IGNORE_INDEX).sum())}

    def forward(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        loss_sum, nll_sum, correct = teacher_forced(model, batch, self.pad_id, self.config.label_smoothing)
        outputs = {}
        if not self.training and self.config.decode and self.tokenizer is not None:
            outputs = flatten_outputs(decode(model, batch, self.search), batch["index"])
        return ObjectiveOutput(
            loss_sums={"translation": loss_sum},
            metrics={"translation_nll": nll_sum, "translation_correct": correct},
            outputs=outputs,
        )

    def finish_evaluation(self, outputs: dict[str, torch.Tensor]) -> dict[str, float]:
        if "tokens" not in outputs or self.tokenizer is None:
            return {}
        decoded = unflatten_outputs(outputs)
        rows = sorted(decoded)
        hypotheses = [self.tokenizer.decode(decoded[i], skip_special_tokens=True).strip() for i in rows]
        scores = bleu_chrf(hypotheses, [self.references[i] for i in rows], self.config.bleu_tokenize)
        log.info(
            "BLEU %.2f (%s), chrF %.2f (%s) on %d sentences",
            scores["bleu"],
            scores["bleu_signature"],
            scores["chrf"],
            scores["chrf_signature"],
            len(rows),
        )
        self.last_metrics = {**scores, "sentences": len(rows)}
        self.artifacts = {"translations.txt": "".join(h + "\n" for h in hypotheses)}
        return {"bleu": scores["bleu"], "chrf": scores["chrf"]}
