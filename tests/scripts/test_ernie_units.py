"""scripts/ernie_units.py counts the knowledge units of a corpus: entities from a gazetteer made of a CoNLL file's
gold entities, matched case-sensitively, every occurrence counted."""

from tests.scripts import run_json

CORPUS = (
    "I flew from New York to London .\nLondon is big and New York is bigger .\n\nPeople in new york like London .\n"
)
CONLL = "I\tO\nlove\tO\nNew\tB-location\nYork\tI-location\n\nLondon\tB-location\ncalling\tO\n"


def test_gazetteer_entities_are_counted_per_occurrence(tmp_path):
    corpus, conll, vocab = tmp_path / "corpus.txt", tmp_path / "train.conll", tmp_path / "vocab.txt"
    corpus.write_text(CORPUS, encoding="utf-8")
    conll.write_text(CONLL, encoding="utf-8")
    words = sorted({w.lower() for w in CORPUS.split()})
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n", encoding="utf-8")
    args = ["--corpus", corpus, "--tokenizer", vocab, "--gazetteer-from-conll", conll, "--passes", "0"]
    result = run_json("ernie_units.py", *args, "--cache-dir", tmp_path / "cache")
    assert result["gazetteer_entries"] == 2 and result["sentences"] == 3 and result["words"] == 24
    # "new york" in lower case is not the gazetteer's "New York" (names match exactly by default).
    assert result["entities"] == 5 and result["top_entities"] == [["London", 3], ["New York", 2]]
    assert result["phrases"] == 0 and result["settings"]["collocation_passes"] == 0
