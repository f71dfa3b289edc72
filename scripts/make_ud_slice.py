"""Build the bundled UD English-EWT slice (plm_toolkit/corpora/ud_ewt/) from a git clone of UD_English-EWT.

    python scripts/make_ud_slice.py /path/to/UD_English-EWT            # a clone (bare or not), at its HEAD
    python scripts/make_ud_slice.py /path/to/UD_English-EWT --revision 15d613d8 --out /tmp/ud_ewt

The repository's released en_ewt-ud-train.conllu may be absent (a clone that skipped its large files); the treebank
builds it itself by concatenating not-to-release/sources/<path> in the order of not-to-release/file-lists/files.train
(not-to-release/tools/build.py). This script does the same, reading every file from git at --revision, and checks the
result against the git blob id the tree records for en_ewt-ud-train.conllu, so that the slice comes from exactly the
released file.

train.conllu gets the first --train-sentences sentences of the train split, dev.conllu the first --dev-sentences of
en_ewt-ud-dev.conllu, in order. To keep the package small the columns plm-finetune task=pos does not read (LEMMA,
FEATS, HEAD, DEPREL, DEPS, MISC) become ``_`` and only the ``# sent_id`` and ``# text`` comments stay; ID, FORM, UPOS
and XPOS are unchanged, and so are the multiword-token and empty-node lines (their other columns blanked too).
Prints JSON: each file's sentences, words, bytes and sha256.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "plm_toolkit" / "corpora" / "ud_ewt"
FILE_LIST = "not-to-release/file-lists/files.train"
SOURCES = "not-to-release/sources/"
TRAIN = "en_ewt-ud-train.conllu"
DEV = "en_ewt-ud-dev.conllu"
KEPT_COMMENTS = ("# sent_id ", "# text ")
KEPT_COLUMNS = (0, 1, 3, 4)  # ID, FORM, UPOS, XPOS


class Treebank:
    """Files of one revision of a UD treebank's git repository (a bare clone or a work tree's .git)."""

    def __init__(self, git_dir: Path, revision: str):
        self.git_dir = git_dir / ".git" if (git_dir / ".git").exists() else git_dir
        self.revision = self._git("rev-parse", "--verify", f"{revision}^{{commit}}").decode().strip()

    def _git(self, *args: str) -> bytes:
        done = subprocess.run(["git", f"--git-dir={self.git_dir}", *args], capture_output=True, check=False)
        if done.returncode:
            raise SystemExit(f"git {' '.join(args)}: {done.stderr.decode().strip()}")
        return done.stdout

    def read(self, path: str) -> bytes:
        return self._git("cat-file", "blob", f"{self.revision}:{path}")

    def blob_id(self, path: str) -> str:
        return self._git("rev-parse", f"{self.revision}:{path}").decode().strip()


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def rebuild_train(treebank: Treebank) -> str:
    """en_ewt-ud-train.conllu as not-to-release/tools/build.py writes it, checked against the tree's blob id."""
    paths = [line.strip() for line in treebank.read(FILE_LIST).decode("utf-8").splitlines() if line.strip()]
    data = b"".join(treebank.read(SOURCES + path) for path in paths)
    expected = treebank.blob_id(TRAIN)
    if git_blob_id(data) != expected:
        raise SystemExit(f"the rebuilt {TRAIN} is not the released one (git blob {expected}); build.py changed?")
    return data.decode("utf-8")


def sentences(text: str) -> list[list[str]]:
    """The text's sentences, each as its lines (comments and word lines), in order."""
    return [block.splitlines() for block in text.split("\n\n") if block.strip()]


def slim(sentence: list[str]) -> list[str]:
    """The sentence with only the sent_id and text comments, and only ID, FORM, UPOS and XPOS filled in."""
    out = []
    for line in sentence:
        if line.startswith("#"):
            if line.startswith(KEPT_COMMENTS):
                out.append(line)
            continue
        fields = line.split("\t")
        if len(fields) != 10:
            raise SystemExit(f"not a CoNLL-U word line (10 tab-separated columns): {line!r}")
        out.append("\t".join(field if i in KEPT_COLUMNS else "_" for i, field in enumerate(fields)))
    return out


def write_slice(path: Path, chosen: list[list[str]]) -> dict:
    data = "".join("\n".join(slim(sentence)) + "\n\n" for sentence in chosen).encode("utf-8")
    path.write_bytes(data)
    words = sum(1 for s in chosen for line in s if line[:1].isdigit() and line.split("\t")[0].isdigit())
    return {
        "file": str(path),
        "sentences": len(chosen),
        "words": words,
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("repository", type=Path, help="a git clone of UniversalDependencies/UD_English-EWT")
    parser.add_argument("--revision", default="HEAD", help="the commit to read (default: HEAD)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--train-sentences", type=int, default=2000)
    parser.add_argument("--dev-sentences", type=int, default=1000)
    args = parser.parse_args()

    treebank = Treebank(args.repository.expanduser(), args.revision)
    train = sentences(rebuild_train(treebank))
    dev = sentences(treebank.read(DEV).decode("utf-8"))
    args.out.mkdir(parents=True, exist_ok=True)
    report = {
        "revision": treebank.revision,
        "train": write_slice(args.out / "train.conllu", train[: args.train_sentences]),
        "dev": write_slice(args.out / "dev.conllu", dev[: args.dev_sentences]),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
