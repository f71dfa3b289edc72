"""scripts/split_squad.py splits a SQuAD file by article: whole articles, in order, the format kept."""

import json

from tests.scripts import run_script


def squad(articles: int) -> dict:
    """Article i holds i + 1 questions over one paragraph."""
    data = [
        {
            "title": f"article {i}",
            "paragraphs": [
                {
                    "context": "Paris is the capital of France.",
                    "qas": [
                        {"id": f"{i}-{j}", "question": "Capital?", "answers": [{"text": "Paris", "answer_start": 0}]}
                        for j in range(i + 1)
                    ],
                }
            ],
        }
        for i in range(articles)
    ]
    return {"version": "v2.0", "data": data}


def test_the_first_articles_go_to_the_first_file_and_the_rest_to_the_second(tmp_path):
    source, first, second = tmp_path / "dev.json", tmp_path / "train.json", tmp_path / "eval.json"
    source.write_text(json.dumps(squad(4)), encoding="utf-8")
    printed = run_script("split_squad.py", source, first, second, "--first", 3)
    one, two = (json.loads(p.read_text(encoding="utf-8")) for p in (first, second))
    assert [a["title"] for a in one["data"]] == ["article 0", "article 1", "article 2"]
    assert two["data"] == squad(4)["data"][3:] and one["version"] == two["version"] == "v2.0"
    assert printed.splitlines() == [f"{first}: 3 articles, 6 questions", f"{second}: 1 articles, 4 questions"]
