"""Split an official SQuAD JSON file by article into two files (train / held-out), keeping the format.

    python scripts/split_squad.py ../shared/data/squad2/cs224n-dev-v2.0.json --first 12 train.json eval.json

The first ``--first`` articles go to the first output, the rest to the second: no paragraph is in both.
"""

import argparse
import json

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("source")
parser.add_argument("first_out")
parser.add_argument("second_out")
parser.add_argument("--first", type=int, required=True, help="articles in the first output")
args = parser.parse_args()
with open(args.source, encoding="utf-8") as f:
    dataset = json.load(f)
for path, articles in (
    (args.first_out, dataset["data"][: args.first]),
    (args.second_out, dataset["data"][args.first :]),
):
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"version": dataset.get("version", ""), "data": articles}, f, ensure_ascii=False)
    questions = sum(len(p["qas"]) for a in articles for p in a["paragraphs"])
    print(f"{path}: {len(articles)} articles, {questions} questions")
