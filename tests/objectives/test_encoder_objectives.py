"""Whole-word and n-gram masking, sentence-order swaps, and replaced-token detection on hand-built batches."""

import pickle
from collections import Counter

import pytest
import torch

from plm_toolkit.data.tokenization.vocab import Vocab
from plm_toolkit.models.albert import Albert, AlbertConfig
from plm_toolkit.models.electra import Electra, ElectraConfig
from plm_toolkit.objectives.masking import (
    IGNORE_INDEX,
    MaskingTransform,
    choose_ngrams,
    ngram_probabilities,
    word_spans,
)
from plm_toolkit.objectives.mlm_sop import MlmSop, MlmSopConfig
from plm_toolkit.objectives.rtd import ReplacedTokenDetection, RtdConfig, rtd_labels
from plm_toolkit.objectives.sop import SegmentSwap

PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
VOCAB_SIZE = 97
# Ids 50..96 continue a word (like WordPiece's ##pieces); 5..49 start one.
CONTINUATIONS = frozenset(range(50, VOCAB_SIZE))
VOCAB = Vocab(VOCAB_SIZE, PAD, UNK, CLS, SEP, MASK, continuation_ids=CONTINUATIONS)


def row_batch(ids: list[list[int]], types: list[list[int]] | None = None) -> dict[str, torch.Tensor]:
    width = max(len(r) for r in ids)
    input_ids = torch.tensor([r + [PAD] * (width - len(r)) for r in ids])
    attention = (torch.arange(width)[None] < torch.tensor([len(r) for r in ids])[:, None]).long()
    type_ids = torch.zeros_like(input_ids)
    if types is not None:
        type_ids = torch.tensor([t + [0] * (width - len(t)) for t in types])
    return {
        "input_ids": input_ids,
        "attention_mask": attention,
        "token_type_ids": type_ids,
        "special_tokens_mask": torch.isin(input_ids, torch.tensor([CLS, SEP, MASK])) | (attention == 0),
    }


def masking(unit: str, **rates) -> MaskingTransform:
    return MaskingTransform(VOCAB_SIZE, MASK, VOCAB.special_ids, masking=unit, continuation_ids=CONTINUATIONS, **rates)


def test_word_spans_group_continuations_that_follow_their_word():
    # positions 1..6 with ids: start, cont, cont, start, cont; position 9 continues but follows a gap.
    assert word_spans([1, 2, 3, 4, 5, 9], [False, True, True, False, True, True]) == [[1, 2, 3], [4, 5], [9]]


@pytest.mark.parametrize("unit", ["whole_word", "ngram"])
def test_word_units_mask_every_piece_of_a_chosen_word(unit):
    generator = torch.Generator().manual_seed(0)
    rows = []
    for _ in range(40):
        body = []
        while len(body) < 60:  # words of 1-3 pieces
            body += [int(torch.randint(5, 50, (1,), generator=generator))]
            body += torch.randint(50, VOCAB_SIZE, (int(torch.randint(0, 3, (1,), generator=generator)),)).tolist()
        rows.append([CLS, *body, SEP])
    batch = row_batch(rows)
    out = masking(unit, mask_prob=0.2)(batch, range(40))
    chosen = out["mlm_labels"] != IGNORE_INDEX
    assert chosen.any()
    for row in range(40):
        ids = batch["input_ids"][row].tolist()
        words = word_spans(
            list(range(1, len(rows[row]) - 1)), [i in CONTINUATIONS for i in ids[1 : len(rows[row]) - 1]]
        )
        for word in words:  # a word is masked whole or not at all
            assert len({bool(chosen[row, p]) for p in word}) == 1
        assert chosen[row].sum() <= round(0.2 * (len(rows[row]) - 2))
    assert torch.equal(out["mlm_labels"][chosen], batch["input_ids"][chosen])


def test_ngram_lengths_follow_one_over_n():
    # Low density, so that overlaps (which reject long spans more often) hardly bias the sample.
    generator = torch.Generator().manual_seed(1)
    lengths, drawn = Counter(), Counter()
    for _ in range(300):
        spans, draws = choose_ngrams(2000, 40, 3, [1] * 2000, generator)
        lengths.update(len(s) for s in spans)
        drawn.update(draws)
    expected = ngram_probabilities(3).tolist()  # 6/11, 3/11, 2/11
    assert expected == pytest.approx([6 / 11, 3 / 11, 2 / 11])
    total = sum(drawn.values())
    assert [drawn[n] / total for n in (1, 2, 3)] == pytest.approx(expected, abs=0.02)
    total = sum(lengths.values())
    assert [lengths[n] / total for n in (1, 2, 3)] == pytest.approx(expected, abs=0.04)


def test_ngram_spans_never_overlap_and_respect_the_budget():
    generator = torch.Generator().manual_seed(2)
    word_lengths = torch.randint(1, 4, (50,), generator=generator).tolist()
    for _ in range(100):
        spans, _ = choose_ngrams(50, 12, 3, word_lengths, generator)
        words = [w for s in spans for w in s]
        assert len(words) == len(set(words)) and sum(word_lengths[w] for w in words) <= 12
        assert all(s == list(range(s[0], s[0] + len(s))) and len(s) <= 3 for s in spans)


def pair_rows():
    """[CLS] A [SEP] B [SEP] rows with distinct A and B ids, and one padded row."""
    a, b = [10, 11, 12], [20, 21]
    long_a, long_b = [30, 31], [40, 41, 42, 43]
    rows = [[CLS, *a, SEP, *b, SEP], [CLS, *long_a, SEP, *long_b, SEP]]
    types = [[0] * 5 + [1] * 3, [0] * 4 + [1] * 5]
    return row_batch(rows, types), (a, b), (long_a, long_b)


def test_segment_swap_swaps_segments_types_and_labels():
    batch, first, second = pair_rows()
    out = SegmentSwap(swap_prob=1.0)(batch, [0, 1])
    assert out["sop_label"].tolist() == [1, 1]
    for row, (a, b) in enumerate((first, second)):
        length = len(a) + len(b) + 3
        assert out["input_ids"][row, :length].tolist() == [CLS, *b, SEP, *a, SEP]
        assert out["token_type_ids"][row, :length].tolist() == [0] * (len(b) + 2) + [1] * (len(a) + 1)
        assert out["special_tokens_mask"][row, :length].tolist() == [True] + [False] * len(b) + [True] + [False] * len(
            a
        ) + [True]
    assert out["input_ids"][0, 8:].tolist() == [PAD]  # padding stays where it was
    kept = SegmentSwap(swap_prob=0.0)(batch, [0, 1])
    assert kept["sop_label"].tolist() == [0, 0] and torch.equal(kept["input_ids"], batch["input_ids"])


def test_segment_swap_rate_and_determinism():
    batch, _, _ = pair_rows()
    batch = {k: v.repeat(500, 1) for k, v in batch.items()}
    swap = pickle.loads(pickle.dumps(SegmentSwap(0.5)))
    out = swap(batch, range(1000))
    assert 0.45 < out["sop_label"].float().mean().item() < 0.55
    assert torch.equal(swap(batch, range(1000))["input_ids"], out["input_ids"])


def test_mlm_sop_swaps_then_masks_and_trains():
    model = Albert(AlbertConfig(vocab_size=VOCAB_SIZE, hidden_size=36, num_layers=2, num_heads=3, intermediate_size=37))
    objective = MlmSop(MlmSopConfig(mask_prob=0.3), model, VOCAB)
    batch, _, _ = pair_rows()
    out = objective.batch_transform()(batch, [5, 6])
    assert {"sop_label", "mlm_labels"} <= set(out)
    chosen = out["mlm_labels"] != IGNORE_INDEX
    assert not (chosen & out["special_tokens_mask"]).any()  # masking saw the swapped positions
    loss = objective(model, out)
    assert set(loss.loss_sums) == {"mlm", "sop"}
    (loss.loss_sums["mlm"] + loss.loss_sums["sop"]).backward()


def test_rtd_labels_count_a_sample_equal_to_the_original_as_original():
    ids = torch.tensor([[CLS, MASK, 11, MASK, SEP, PAD], [CLS, 20, MASK, SEP, PAD, PAD]])
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[0, 1], labels[0, 3], labels[1, 2] = 10, 12, 21  # originals at the masked positions
    mask = (ids != PAD).long()
    sampled = torch.tensor([10, 55, 33, 77])  # row 0: the original, a replacement; row 1: a replacement; padding
    positions = torch.tensor([1, 3, 8, 12])  # flat, the last a padding slot (B * T)
    corrupted, replaced = rtd_labels(ids, labels, sampled, positions, mask)
    assert corrupted.tolist() == [[CLS, 10, 11, 55, SEP, PAD], [CLS, 20, 33, SEP, PAD, PAD]]
    assert replaced.tolist() == [[False, False, False, True, False, False], [False, False, True, False, False, False]]


def test_rtd_objective_shares_embeddings_and_detaches_sampling():
    config = ElectraConfig(vocab_size=VOCAB_SIZE, hidden_size=36, num_layers=2, num_heads=3, embedding_size=17)
    model = Electra(config)
    objective = ReplacedTokenDetection(RtdConfig(generator_hidden_fraction=1 / 3), model, VOCAB)
    assert objective.generator.config.hidden_size == 12 and objective.generator.config.num_layers == 2
    assert not any("embeddings.word" in k for k in objective.state_dict())  # shared, owned by the backbone
    rows = [[CLS, *torch.randint(5, VOCAB_SIZE, (20,)).tolist(), SEP] for _ in range(4)]
    batch = objective.batch_transform()(row_batch(rows), range(4))
    counts = objective.target_counts(batch)
    assert counts["rtd"] == 4 * 22 and counts["mlm"] == 4 * 3
    out = objective(model.train(), batch)
    assert set(out.loss_sums) == {"mlm", "rtd"} and 0 <= out.metrics["rtd_correct"] <= counts["rtd"]
    # The discriminator loss reaches the generator only through the shared embeddings, never through sampling.
    out.loss_sums["rtd"].backward()
    assert all(p.grad is None for p in objective.generator.encoder.parameters())
    assert model.embeddings.word_embeddings.weight.grad is not None
    model.zero_grad()
    objective(model, batch).loss_sums["mlm"].backward()
    assert model.embeddings.word_embeddings.weight.grad is not None  # the generator trains the shared table too
    # Evaluation samples from a fixed seed.
    objective.eval()
    assert torch.equal(objective(model.eval(), batch).loss_sums["rtd"], objective(model, batch).loss_sums["rtd"])
