"""BLEU and chrF through sacrebleu on known strings, against BLEU's formula worked out by hand."""

import math

import pytest

from plm_toolkit.generation.text_metrics import bleu_chrf, exact_match

pytest.importorskip("sacrebleu")


def test_bleu_of_known_strings_matches_the_formula():
    hyp = ["the cat sat on the red mat today"]
    ref = ["the cat sat on the mat today"]
    # Clipped n-gram matches / hypothesis n-grams: 1-grams 7/8, 2-grams 5/7 (all but "the red", "red mat"),
    # 3-grams 3/6, 4-grams 2/5 ("the cat sat on", "cat sat on the"); hypothesis 8 tokens > reference 7, so no
    # brevity penalty.
    expected = 100 * math.exp((math.log(7 / 8) + math.log(5 / 7) + math.log(3 / 6) + math.log(2 / 5)) / 4)
    scores = bleu_chrf(hyp, ref)
    assert scores["bleu"] == pytest.approx(expected, abs=1e-6)
    assert scores["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    assert scores["chrf_signature"].startswith("nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:")
    assert 0 < scores["chrf"] < 100


def test_perfect_and_disjoint_output():
    refs = ["Die Datei wurde nicht gefunden.", "Drucker hinzufügen"]
    assert bleu_chrf(refs, refs)["bleu"] == pytest.approx(100.0)
    assert bleu_chrf(refs, refs)["chrf"] == pytest.approx(100.0)
    assert bleu_chrf(["xyz qqq", "abc"], refs)["bleu"] == pytest.approx(0.0)
    # Brevity penalty: a correct but short hypothesis loses exp(1 - r/c).
    short = bleu_chrf(["a b c d e"], ["a b c d e f g h"])["bleu"]
    assert short == pytest.approx(100 * math.exp(1 - 8 / 5), abs=1e-6)


def test_exact_match():
    assert exact_match(["positive ", "negative"], ["positive", "positive"]) == 0.5
