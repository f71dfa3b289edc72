"""Build the bundled default corpus (plm_toolkit/corpora/wikitext2/) from the WikiText-2 raw test split.

    python scripts/make_default_corpus.py                     # from ../shared/data/wikitext2/wiki.test.raw
    python scripts/make_default_corpus.py --source wiki.test.raw --out /tmp/corpus

WikiText marks articles with ` = Title = ` lines and sections with ` = = Section = = ` (deeper levels add more
`=`); its tokenizer split hyphens and number separators into ` @-@ `, ` @,@ ` and ` @.@ `. We write our corpus
format instead (see plm_toolkit/data/sources/corpus.py): UTF-8 with LF line endings, one article per block, a blank line
between articles, one paragraph per line, headings dropped, the three markers joined back. Other WikiText
spacing (`actor . He`, `Teddy 's`) is kept: BERT-style pre-tokenization splits punctuation either way.

Articles go, in order, to valid.txt (every tenth) or train.txt, until the whole corpus would exceed
--max-bytes; later articles are left out so that the repository stays small.
"""

from __future__ import annotations

import argparse
import hashlib
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = REPO.parent / "shared" / "data" / "wikitext2" / "wiki.test.raw"
DEFAULT_OUT = REPO / "plm_toolkit" / "corpora" / "wikitext2"

TITLE = re.compile(r"^= (?!=).* =$")  # ` = Title = ` once stripped
SECTION = re.compile(r"^(= )+=?.*(= )*=$")  # ` = = Section = = `, ` = = = Sub = = = `
MARKERS = {" @-@ ": "-", " @,@ ": ",", " @.@ ": "."}


def read_articles(source: Path) -> list[list[str]]:
    """Articles as lists of paragraphs, headings dropped and markers joined back."""
    articles: list[list[str]] = []
    for raw in source.read_text(encoding="utf-8").splitlines():  # splitlines drops the CRLF endings
        line = raw.strip()
        if not line:
            continue
        if TITLE.match(line):
            articles.append([])
            continue
        if SECTION.match(line):
            continue
        for marker, text in MARKERS.items():
            line = line.replace(marker, text)
        if not articles:  # text before the first title: an article without one
            articles.append([])
        articles[-1].append(line)
    return [a for a in articles if a]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--max-bytes", type=int, default=1_000_000, help="size budget of train + valid")
    parser.add_argument("--valid-every", type=int, default=10, help="every Nth article goes to valid.txt")
    args = parser.parse_args()

    articles = read_articles(args.source)
    splits: dict[str, list[str]] = {"train": [], "valid": []}
    total = 0
    kept = 0
    for index, article in enumerate(articles):
        block = "\n".join(article) + "\n"
        size = len(block.encode("utf-8")) + 1  # + the blank line
        if total + size > args.max_bytes:
            break
        total += size
        kept += 1
        splits["valid" if index % args.valid_every == args.valid_every - 1 else "train"].append(block)

    args.out.mkdir(parents=True, exist_ok=True)
    for name, blocks in splits.items():
        path = args.out / f"{name}.txt"
        path.write_text("\n".join(blocks), encoding="utf-8", newline="\n")
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        lines = sum(len(b.splitlines()) for b in blocks)
        print(f"{path}: {len(blocks)} articles, {lines} paragraphs, {path.stat().st_size:,} B, sha256 {digest}")
    print(f"kept {kept} of {len(articles)} articles from {args.source}")


if __name__ == "__main__":
    main()
