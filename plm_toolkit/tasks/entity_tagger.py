"""Entities found by a named-entity tagger that ``plm-finetune task=ner`` produced (``objective.entity_tagger``).

ERNIE 1.0 takes its entity units from a lexical analyzer (Sun et al. 2019, section 3.2); here any NER checkpoint of
this toolkit plays that part: the backbone and its token-classification task (its head, and its task encoder in
finetune.mode=features) are loaded from the checkpoint folder as plm-finetune loads a run's head, each sentence's
words are tagged (the label of a word is the one predicted on its first sub-token, as the task trains it) and the
BIO tags become entity spans with conlleval's chunk rules (``tasks/ner.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from plm_toolkit.core import checkpoint as ckpt
from plm_toolkit.core.errors import CheckpointError
from plm_toolkit.data.units.corpus import register_entity_tagger
from plm_toolkit.objectives.knowledge_masking import TAGGER_KEY as KEY
from plm_toolkit.objectives.knowledge_masking import ner_checkpoint


class EntityTagger:
    """Tags lists of words with a task=ner checkpoint; ``tagger(sentences)`` -> entity spans over word indices."""

    def __init__(self, path: str | Path, batch_size: int = 64):
        from plm_toolkit.data.tokenization.tokenizer import vocab_from_tokenizer
        from plm_toolkit.interop.checkpoint_reader import read_config_yaml
        from plm_toolkit.interop.pretrained import load_backbone
        from plm_toolkit.tasks.base import TaskData, template_of
        from plm_toolkit.tasks.checkpoint_head import run_finetune_mode, start_from_checkpoint_head
        from plm_toolkit.tasks.ner import NerConfig, TokenClassification

        self.folder, self.labels = ner_checkpoint(path)
        loaded = load_backbone(self.folder, with_task_head=True)
        self.model, self.tokenizer = loaded.model.eval(), loaded.tokenizer
        # The tagger as plm-finetune built it (its task encoder too, in finetune.mode=features), its head loaded by
        # the path every fine-tuned checkpoint's head takes; one that does not fit is refused.
        vocab = vocab_from_tokenizer(self.tokenizer, source=self.folder)
        data = TaskData([], None, labels=self.labels)
        finetune = run_finetune_mode(read_config_yaml(self.folder / ckpt.CONFIG_FILE))
        self.task = TokenClassification(NerConfig(labels=self.labels), self.model, vocab, data, finetune=finetune)
        try:
            start_from_checkpoint_head(self.task, self.model, loaded.task_head, required=True)
        except CheckpointError as err:
            raise CheckpointError(f"{KEY}={path}: {err}") from None
        self.task.eval()
        self.template = template_of(self.tokenizer, pair=False)
        config = self.model.config
        longest = getattr(config, "max_position_embeddings", 512) - getattr(config, "position_offset", 0)
        self.budget = min(longest, 512) - self.template.num_special
        self.batch_size = batch_size

    @torch.no_grad()
    def __call__(self, sentences: Sequence[Sequence[str]]) -> list[list[tuple[int, int]]]:
        from plm_toolkit.tasks.ner import entities

        out: list[list[tuple[int, int]]] = []
        for lo in range(0, len(sentences), self.batch_size):
            chunk = [list(words) for words in sentences[lo : lo + self.batch_size]]
            for words, tags in zip(chunk, self._tag(chunk), strict=True):
                out.append(sorted((first, last + 1) for _, first, last in entities(tags[: len(words)])))
        return out

    def _tag(self, chunk: list[list[str]]) -> list[list[str]]:
        """BIO tags of each word (O for a word without a sub-token or past the length budget)."""
        nonempty = [words or ["."] for words in chunk]
        encodings = self.tokenizer.encode_batch(nonempty, is_pretokenized=True, add_special_tokens=False)
        rows, firsts = [], []
        for encoding in encodings:
            ids, types, starts = self.template.assemble(encoding.ids[: self.budget])
            first: dict[int, int] = {}
            for position, word in enumerate(encoding.word_ids[: self.budget]):
                if word is not None and word not in first:
                    first[word] = starts["A"] + position
            rows.append((ids, types))
            firsts.append(first)
        width = max(len(ids) for ids, _ in rows)
        input_ids = torch.full((len(rows), width), 0, dtype=torch.long)
        token_types = torch.zeros_like(input_ids)
        mask = torch.zeros_like(input_ids)
        for i, (ids, types) in enumerate(rows):
            input_ids[i, : len(ids)] = torch.tensor(ids)
            token_types[i, : len(ids)] = torch.tensor(types)
            mask[i, : len(ids)] = 1
        batch = {"input_ids": input_ids, "attention_mask": mask, "token_type_ids": token_types}
        predicted = self.task.logits(self.model, batch).argmax(dim=-1)  # (B, T)
        tags = []
        for i, (words, first) in enumerate(zip(chunk, firsts, strict=True)):
            tags.append([self.labels[int(predicted[i, first[w]])] if w in first else "O" for w in range(len(words))])
        return tags


register_entity_tagger(EntityTagger)
