"""scripts/bench_translation.py trains a Transformer for a fixed time through plm-train, decodes the test set with beam
search and scores it against the copy-the-source baseline with sacrebleu."""

import json

import pytest

from tests.scripts import run_json

NOUNS = [("cat", "Katze"), ("house", "Haus"), ("tree", "Baum"), ("car", "Auto"), ("book", "Buch"), ("dog", "Hund")]


def write_pairs(folder, name: str, rows: list[tuple[str, str]]) -> None:
    for side, lang in enumerate(("en", "de")):
        (folder / f"{name}.{lang}").write_text("".join(row[side] + "\n" for row in rows), encoding="utf-8")


@pytest.mark.slow
def test_trains_for_its_time_budget_then_scores_the_test_set(tmp_path):
    sacrebleu = pytest.importorskip("sacrebleu")
    rows = [(f"the {NOUNS[i % 6][0]} number {i} is red", f"{NOUNS[i % 6][1]} Nummer {i} ist rot") for i in range(40)]
    data = tmp_path / "en-de"
    data.mkdir()
    write_pairs(data, "train", rows[:32])
    write_pairs(data, "test", rows[32:])
    (data / "dev.jsonl").write_text("".join(json.dumps({"en": e, "de": d}) + "\n" for e, d in rows[32:36]))
    args = ["--data", data, "--run-dir", tmp_path / "run", "--minutes", "0.03", "--hidden", "32", "--layers", "1"]
    args += ["--heads", "2", "--vocab-size", "300", "--max-tokens", "256", "--warmup", "10", "--beams", "2"]
    result = run_json("bench_translation.py", *args, "--test-limit", "5", "--threads", "1")
    assert result["steps"] >= 1 and result["test_pairs"] == 5 and result["beams"] == 2
    assert result["model"] == {"hidden_size": 32, "layers": 1, "heads": 2}
    sources, references = [e for e, _ in rows[32:37]], [d for _, d in rows[32:37]]
    copy = result["copy_source_baseline"]
    assert copy["bleu"] == pytest.approx(sacrebleu.corpus_bleu(sources, [references]).score, abs=0.05)
    assert 0.0 <= result["test"]["bleu"] <= 100.0 and 0.0 <= result["test"]["chrf"] <= 100.0
    assert len((tmp_path / "run" / "test_translations.txt").read_text(encoding="utf-8").splitlines()) == 5
