"""Count ERNIE's knowledge units in a corpus and print JSON: sentences, words, phrase and entity occurrences, distinct
phrases and entities, the most frequent of each, and the seconds each step took.

    .venv/bin/python scripts/ernie_units.py                               # WikiText-2 valid + test, collocations
    .venv/bin/python scripts/ernie_units.py --gazetteer-from-conll ../shared/data/ner/wnut17train.conll
    .venv/bin/python scripts/ernie_units.py --entity-tagger runs/ner/checkpoints/last --threshold 50

Phrases come from a lexicon (--phrase-lexicon) or are learned by collocation scores (--min-count, --threshold,
--passes); entities from a gazetteer (--gazetteer, or the entity strings of a CoNLL file's gold tags with
--gazetteer-from-conll) and/or a task=ner checkpoint (--entity-tagger). The corpus is tokenized with a WordPiece
vocabulary (--tokenizer, default the bert-base-uncased vocab.txt of ../shared/data/models) into a token store of
units (docs/data-store.md) under --cache-dir, by --num-proc worker processes.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"


def conll_gazetteer(conll: Path, out: Path) -> int:
    """Write the distinct entity strings of a CoNLL file's gold BIO tags, one per line; return how many."""
    from plm_toolkit.tasks.ner import entities, read_conll

    names = set()
    for sentence in read_conll(conll):
        for _, first, last in entities(sentence.tags):
            names.add(" ".join(sentence.words[first : last + 1]))
    out.write_text("".join(f"{n}\n" for n in sorted(names)), encoding="utf-8")
    return len(names)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    wikitext = SHARED / "wikitext2"
    parser.add_argument("--corpus", nargs="+", default=[wikitext / "wiki.valid.tokens", wikitext / "wiki.test.tokens"])
    parser.add_argument("--tokenizer", default=SHARED / "models" / "bert-base-uncased" / "vocab.txt")
    parser.add_argument("--phrase-lexicon")
    parser.add_argument("--gazetteer")
    parser.add_argument("--gazetteer-from-conll")
    parser.add_argument("--entity-tagger")
    parser.add_argument("--min-count", type=int, default=5)
    parser.add_argument("--threshold", type=float, default=100.0)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--segmenter", default="regex", choices=["regex", "jieba"])
    parser.add_argument("--cache-dir", default=None, help="default: a fresh temporary folder (counts from scratch)")
    parser.add_argument("--num-proc", type=int, default=None, help="worker processes (default: the cores available)")
    args = parser.parse_args()

    sys.path.insert(0, str(REPO))
    import plm_toolkit.commands.train  # noqa: F401  (registries: the entity tagger loads a backbone)
    from plm_toolkit.core.data_schema import DataConfig, TokenizerConfig
    from plm_toolkit.data.store.preparation import prepare_store
    from plm_toolkit.data.store.token_store import TokenStore
    from plm_toolkit.data.units.corpus import TaggedSources
    from plm_toolkit.tasks.entity_tagger import EntityTagger

    scratch_folder = tempfile.TemporaryDirectory(prefix="ernie_units-")  # removed when the script exits
    scratch = Path(scratch_folder.name)
    cache = Path(args.cache_dir) if args.cache_dir else scratch / "cache"
    result: dict = {"corpus": [str(c) for c in args.corpus]}
    gazetteer = args.gazetteer
    if args.gazetteer_from_conll:
        gazetteer = str(scratch / "gazetteer.txt")
        result["gazetteer_entries"] = conll_gazetteer(Path(args.gazetteer_from_conll), Path(gazetteer))
    sources = SimpleNamespace(
        word_segmenter=args.segmenter,
        presegmented=False,
        phrase_lexicon=args.phrase_lexicon,
        phrase_lexicon_case="ignore",
        entity_gazetteer=gazetteer,
        entity_gazetteer_case="exact",
        entity_tagger=args.entity_tagger,
        collocation_min_count=args.min_count,
        collocation_threshold=args.threshold,
        collocation_passes=args.passes,
    )
    data_cfg = OmegaConf.structured(
        DataConfig(
            train_files=[str(c) for c in args.corpus],
            cache_dir=str(cache),
            num_proc=args.num_proc,
            tokenizer=TokenizerConfig(path=str(args.tokenizer)),
        )
    )
    started = time.perf_counter()
    tagged = TaggedSources(sources, EntityTagger(args.entity_tagger)) if args.entity_tagger else sources
    store = TokenStore(prepare_store(data_cfg, "units", units=tagged))
    result["seconds"] = round(time.perf_counter() - started, 1)
    result["settings"] = {k: v for k, v in vars(sources).items() if v is not None}
    learned = store.folder / "phrases.txt"
    if learned.is_file():
        result["learned_phrase_types"] = len(learned.read_text(encoding="utf-8").splitlines())
    result |= store.manifest["splits"]["train"]["units"]
    print(json.dumps(result, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
