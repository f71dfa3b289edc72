"""ELMo's bidirectional language model objective (Peters et al. 2018, section 3.1; bilm-tf's training.py).

Two streams of the same sentences, each sentence framed as ``<S> w1 .. wn </S>``: the forward stream in reading
order and the backward stream with every sentence reversed (``</S> wn .. w1 <S>``), sentences in corpus order in
both. Row b of a batch holds the same window of each stream; the forward LSTMs read the first, the backward LSTMs
the second, both from the states they ended the previous window with (the rows continue their streams, as bilm-tf
trains). Each direction predicts its stream's next word with one shared softmax; the step from one sentence's end
to the next sentence's start is not predicted (bilm-tf never feeds ``</S>`` as an input).

The softmax covers the first ``softmax_size`` words of the word vocabulary (``data.tokenizer.kind=word``: ``<S>``,
``</S>``, ``<UNK>``, then by falling frequency); rarer words are predicted as ``<UNK>``, though the character CNN
reads them in full, and so are words missing from the vocabulary altogether (an evaluation text's new words): the
data carries their spelling (``data/tokenization/spellings.py``), which the batch transform reads them by. Training uses
a sampled softmax with ``num_negatives`` log-uniform negatives per batch when the softmax is larger than that
(``nn/sampled_softmax.py``), as the paper trained; evaluation always uses the full one.
Dropout falls on the LSTM outputs before the softmax as in bilm-tf.

The loss is the mean negative log-likelihood over both directions' targets (bilm-tf: the mean of the two means; both
streams have the same number of targets up to a window's edge). Logged: ``bilm_loss``, ``bilm_forward_loss`` and
``bilm_backward_loss``, and in evaluation their perplexities.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from plm_toolkit.core.errors import ConfigError, DataError
from plm_toolkit.core.registry import OBJECTIVES
from plm_toolkit.data.layouts.plan import DataPlan, Layout
from plm_toolkit.data.layouts.registry import choose_layout
from plm_toolkit.data.tokenization.characters import BOS_TOKEN, EOS_TOKEN, character_table
from plm_toolkit.data.tokenization.spellings import spelled_character_ids, spellings_key
from plm_toolkit.data.tokenization.vocab import Vocab
from plm_toolkit.data.tokenization.word_vocabulary import UNK_TOKEN
from plm_toolkit.models.base import CHARACTERS, RECURRENT_MEMORY
from plm_toolkit.nn.losses import linear_cross_entropy
from plm_toolkit.nn.sampled_softmax import sample_log_uniform, sampled_softmax_loss
from plm_toolkit.objectives.base import MemoryObjective, ObjectiveOutput


@dataclass
class BilmConfig:
    # Registry name of the objective.
    name: str = "bilm"
    # Words the softmax predicts: the first softmax_size ids of the word vocabulary (<S> </S> <UNK>, then the most
    # frequent); rarer words are predicted as <UNK>. Defaults to data.tokenizer.vocab_size.
    softmax_size: int = "${data.tokenizer.vocab_size}"  # type: ignore[assignment]
    # Negative words sampled per batch for the sampled softmax while training (the paper: 8192); a softmax no
    # larger than this, or 0, is computed in full. Evaluation always uses the full softmax.
    num_negatives: int = 8192


class CharacterLookup:
    """The batch transform: character ids of both streams' input words, from a (V, C) table of the vocabulary and,
    for words outside it (<UNK> ids), from their own spelling carried with the batch (bilm-tf spells every word it
    reads, ``UnicodeCharsVocabulary.word_to_char_ids``). Picklable, so data-loader workers run it."""

    def __init__(self, table: torch.Tensor, unk_id: int):
        self.table, self.unk_id = table, unk_id

    def __call__(self, batch: dict[str, torch.Tensor], seeds: Sequence[int]) -> dict[str, torch.Tensor]:
        mask = batch["attention_mask"][:, :-1]
        for chars, key in (("char_ids", "input_ids"), ("backward_char_ids", "reverse_ids")):
            spellings = batch.pop(spellings_key(key), None)
            ids = batch[key][:, :-1]  # (B, T)
            batch[chars] = spelled_character_ids(self.table, ids, mask, self.unk_id, spellings)  # (B, T, C)
        return batch


@OBJECTIVES.register("bilm", BilmConfig)
class BidirectionalLanguageModeling(MemoryObjective):
    required_capabilities = frozenset({CHARACTERS, RECURRENT_MEMORY})
    natural_layout = Layout.sentence_streams
    compile_refusal = (
        "ELMo's biLM scores a number of targets that changes with every batch (sentence ends are skipped) through a "
        "softmax whose negatives are sampled per step, so a compiled step would build new graphs batch after batch"
    )
    perplexity_components = frozenset({"bilm", "bilm_forward", "bilm_backward"})
    metric_denominators = {"bilm_forward_loss": "forward", "bilm_backward_loss": "backward"}

    def __init__(self, config: BilmConfig, model: nn.Module, vocab: Vocab):
        super().__init__()
        words = vocab.tokens
        index = {w: i for i, w in enumerate(words)}
        missing = [t for t in (BOS_TOKEN, EOS_TOKEN, UNK_TOKEN) if t not in index]
        if missing:
            raise DataError(
                f"objective=bilm needs a word vocabulary with {', '.join(missing)} (data.tokenizer.kind=word)"
            )
        self.bos_id, self.eos_id, self.unk_id = index[BOS_TOKEN], index[EOS_TOKEN], index[UNK_TOKEN]
        self.softmax_size = min(int(config.softmax_size), len(words))
        if max(self.bos_id, self.eos_id, self.unk_id) >= self.softmax_size:
            raise ConfigError(f"objective.softmax_size={self.softmax_size} leaves <S>, </S> or <UNK> out")
        self.num_negatives = int(config.num_negatives)
        self.table = character_table(words, model.config.max_characters)
        hidden = model.config.hidden_size
        self.dropout = nn.Dropout(model.config.dropout)
        # bilm-tf: W ~ N(0, 1 / hidden), b = 0; shared by both directions.
        self.softmax_weight = nn.Parameter(torch.randn(self.softmax_size, hidden) / math.sqrt(hidden))
        self.softmax_bias = nn.Parameter(torch.zeros(self.softmax_size))

    @classmethod
    def data_plan(cls, config, data_cfg, model_config) -> DataPlan:
        """Windows of data.max_seq_len + 1 tokens of both sentence streams (inputs and next-word targets), one
        after the other, read in stream order: every row continues its text, as the carried LSTM states assume;
        with the spelling of each word the vocabulary lacks, for the character CNN."""
        layout = choose_layout(data_cfg, cls.natural_layout, config.name)
        length = int(data_cfg.max_seq_len)
        return DataPlan(layout, window=length + 1, stride=length, order="stream", spellings=True)

    @classmethod
    def check_data(cls, config, data_cfg) -> None:
        kind = getattr(data_cfg.tokenizer.kind, "value", data_cfg.tokenizer.kind)
        if kind not in ("auto", "word") and not data_cfg.tokenizer.path:
            raise ConfigError(
                f"data.tokenizer.kind={kind}: objective=bilm predicts whole words; set data.tokenizer.kind=word"
            )

    @classmethod
    def check_config(cls, config) -> None:
        if int(config.softmax_size) < 4:
            raise ConfigError(f"objective.softmax_size={config.softmax_size}: needs <S>, </S>, <UNK> and words")
        if config.num_negatives < 0:
            raise ConfigError(f"objective.num_negatives={config.num_negatives}: must be 0 (full softmax) or more")

    def batch_transform(self) -> CharacterLookup:
        return CharacterLookup(self.table, self.unk_id)

    def _targets(self, batch: dict[str, torch.Tensor], key: str, boundary: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(targets, keep) (B, T) of one stream: the next word (<UNK> beyond the softmax), kept except where the
        input ends a sentence (its next word starts the following sentence)."""
        ids = batch[key]
        targets = ids[:, 1:].masked_fill(ids[:, 1:] >= self.softmax_size, self.unk_id)
        keep = batch["attention_mask"][:, 1:].bool() & (ids[:, :-1] != boundary)
        return targets, keep

    def target_counts(self, batch: dict[str, torch.Tensor]) -> dict[str, int]:
        forward = int(self._targets(batch, "input_ids", self.eos_id)[1].sum())
        backward = int(self._targets(batch, "reverse_ids", self.bos_id)[1].sum())
        return {"bilm": forward + backward, "forward": forward, "backward": backward}

    def _nll(self, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Summed negative log-likelihood of targets (N,) given hidden (N, H): sampled while training a softmax
        larger than num_negatives, else in full (in chunks: never all N x V logits at once)."""
        weight, bias = self.softmax_weight, self.softmax_bias
        if self.training and 0 < self.num_negatives < self.softmax_size:
            candidates = sample_log_uniform(self.num_negatives, self.softmax_size)
            return sampled_softmax_loss(hidden.float(), targets, weight.float(), bias.float(), candidates).sum()
        return linear_cross_entropy(hidden, weight, bias, targets)[0]

    def forward(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        mask = batch["attention_mask"][:, :-1]  # (B, T)
        memories = self.memory.get(self.training, batch)
        reps = model(
            char_ids=batch["char_ids"],
            attention_mask=mask,
            memories=memories,
            backward_char_ids=batch["backward_char_ids"],
        )
        self.memory.set(self.training, reps.memories)
        sums = {}
        for name, key, boundary in (("forward", "input_ids", self.eos_id), ("backward", "reverse_ids", self.bos_id)):
            targets, keep = self._targets(batch, key, boundary)
            hidden = self.dropout(reps.extras[name])[keep]  # (N, H)
            sums[name] = self._nll(hidden, targets[keep])
        return ObjectiveOutput(
            loss_sums={"bilm": sums["forward"] + sums["backward"]},
            metrics={f"bilm_{k}_loss": v.detach() for k, v in sums.items()},
        )
