"""data.pair_draws: the pairs half of BERT's --dupe_factor, the sentence pairs drawn N times, every draw one more
pass of the corpus."""

import shutil

import numpy as np

from plm_toolkit.data.build import prepare_pretraining_data
from tests.data.layouts.test_pretraining import labelled_corpus


def test_every_draw_is_a_fresh_pass_and_the_first_is_the_single_draw(tmp_path):
    cfg = labelled_corpus(tmp_path, num_documents=80, max_seq_len=40)
    valid = tmp_path / "valid.txt"
    shutil.copy(cfg.train_files[0], valid)
    cfg.validation_files = [str(valid)]
    one = prepare_pretraining_data(cfg, "sentence_pairs", seed=5)
    cfg.pair_draws = 3
    three = prepare_pretraining_data(cfg, "sentence_pairs", seed=5)

    single = one.train["input_ids"]
    rows = three.train["input_ids"]
    assert len(single) > 100
    draws = three.train.offsets.tolist()
    assert len(draws) == 4 and draws[1] == len(single) and len(rows) == draws[-1]
    assert rows[: len(single)] == single  # draw 0 is what a run of one draw trains on
    blocks = [rows[a:b] for a, b in zip(draws, draws[1:], strict=False)]
    assert blocks[1] != blocks[0] and blocks[2] != blocks[1]  # other cuts, other random next segments
    labels = np.array(three.train["next_sentence_label"])
    for a, b in zip(draws, draws[1:], strict=False):
        assert 0.4 < labels[a:b].mean() < 0.7  # each draw is a whole set of BERT's pairs
    # Each draw reads the whole corpus: nearly every word of the corpus is in every draw (a random next segment
    # may stand in for a few sentences).
    words = {t for ids in single for t in ids}
    for block in blocks:
        assert len({t for ids in block for t in ids}) > 0.9 * len(words)
    # Evaluation keeps one draw.
    assert three.validation["input_ids"] == one.validation["input_ids"]
