"""The bilm objective on hand-built sentence streams: targets, the shared softmax, sampled vs full, carried states."""

import torch
import torch.nn.functional as F

from plm_toolkit.data.layouts.sentence_streams import sentence_streams
from plm_toolkit.data.tokenization.tokenizer import vocab_from_tokenizer
from plm_toolkit.data.tokenization.word_vocabulary import word_tokenizer
from plm_toolkit.models.elmo import Elmo, ElmoConfig
from plm_toolkit.objectives.bilm import BidirectionalLanguageModeling, BilmConfig

WORDS = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran", ".", "rare"]


def setup(softmax_size: int = 12, num_negatives: int = 0):
    torch.manual_seed(0)
    model = Elmo(
        ElmoConfig(
            char_embedding_size=4,
            filters=[[1, 5], [2, 7]],
            num_highway=1,
            hidden_size=9,
            cell_size=15,
            num_layers=2,
            dropout=0.0,
        )
    )
    vocab = vocab_from_tokenizer(word_tokenizer(WORDS))
    words = list(vocab.tokens)
    objective = BidirectionalLanguageModeling(
        BilmConfig(softmax_size=softmax_size, num_negatives=num_negatives), model, vocab
    )
    return model, objective, words


def batch(words, length: int = 9):
    index = {w: i for i, w in enumerate(words)}
    sentences = ["the cat sat on the mat .", "a rare dog ran"]
    documents = [[[index[w] for w in sentence.split()] for sentence in sentences]]
    forward, backward = sentence_streams(documents, index["<S>"], index["</S>"])
    rows = {
        "input_ids": torch.tensor(forward[:length])[None].long(),
        "reverse_ids": torch.tensor(backward[:length])[None].long(),
    }
    rows["attention_mask"] = torch.ones_like(rows["input_ids"])
    return rows


def test_streams_frame_sentences_and_reverse_each_one():
    forward, backward = sentence_streams([[[5, 6, 7], [8]]], bos_id=0, eos_id=1)
    assert forward.tolist() == [0, 5, 6, 7, 1, 0, 8, 1]
    assert backward.tolist() == [1, 7, 6, 5, 0, 1, 8, 0]


def test_targets_skip_sentence_ends_and_rare_words_become_unk():
    model, objective, words = setup(softmax_size=12)  # <S> </S> <UNK> + 9 words: "rare" (id 12) is out
    b = batch(words, length=12)
    targets, keep = objective._targets(b, "input_ids", objective.eos_id)
    inputs = b["input_ids"][0, :-1]
    assert not keep[0][inputs == objective.eos_id].any() and keep.sum() == 10  # </S> -> <S> is never predicted
    assert words.index("rare") >= 12 and (targets[0] == objective.unk_id).sum() == 1
    counts = objective.target_counts(b)
    assert counts["bilm"] == counts["forward"] + counts["backward"] and counts["backward"] == 10


def test_eval_loss_is_the_full_softmax_over_both_directions():
    model, objective, words = setup(num_negatives=4)
    b = objective.batch_transform()(batch(words), [0])
    model.eval(), objective.eval()
    out = objective(model, b)
    reps = model(b["char_ids"], memories=None, backward_char_ids=b["backward_char_ids"])
    total = 0.0
    for name, key, boundary in (
        ("forward", "input_ids", objective.eos_id),
        ("backward", "reverse_ids", objective.bos_id),
    ):
        targets, keep = objective._targets(b, key, boundary)
        logits = reps.extras[name][keep] @ objective.softmax_weight.t() + objective.softmax_bias
        expected = F.cross_entropy(logits, targets[keep], reduction="sum")
        torch.testing.assert_close(out.metrics[f"bilm_{name}_loss"], expected.detach())
        total = total + expected
    torch.testing.assert_close(out.loss_sums["bilm"], total)


def test_training_samples_negatives_and_carries_states():
    model, objective, words = setup(num_negatives=4)
    b = objective.batch_transform()(batch(words), [0])
    model.train(), objective.train()
    torch.manual_seed(1)
    sampled = objective(model, b).loss_sums["bilm"]
    assert torch.isfinite(sampled)
    carried = objective.carried_state()
    assert len(carried) == 8 and carried["memory.0"].shape == (1, 9)  # h, c of 2 layers x 2 directions
    # The next window starts from those states; a new pass over the text (stream_start) starts afresh.
    assert objective.memory.get(True, b) is not None
    assert objective.memory.get(True, {**b, "stream_start": torch.tensor([True])}) is None
    sampled.backward()
    assert objective.softmax_weight.grad is not None and model.token_encoder.projection.weight.grad is not None
