"""Build the small Chinese corpus of plm_toolkit/corpora/zh/ from the zh_CN message catalogs of GNU packages.

The translated messages of coreutils, bash, grep, ... (the Translation Project's Simplified Chinese team, under
each package's GPL-3.0-or-later) are real Chinese prose with punctuation, mixed with command names and options, as
a technical corpus is. Each catalog becomes one document (a blank line between documents), each message one line:
printf directives and menu accelerators removed, lines of a wrapped message joined, and only messages whose
non-space characters are mostly CJK and that hold a Chinese comma or full stop kept. Every tenth message goes to
the validation file.

    python scripts/make_zh_corpus.py --locale-dir /usr/share/locale/zh_CN/LC_MESSAGES --out plm_toolkit/corpora/zh

The .mo files are read with Python's gettext (the GNU catalog format), with no tool from gettext itself.
"""

from __future__ import annotations

import argparse
import gettext
import hashlib
import json
import re
import unicodedata
from pathlib import Path

# Packages whose catalogs are used (GNU ones GPL-3.0-or-later; dpkg and apt GPL-2.0-or-later), in this order.
CATALOGS = (
    "coreutils", "bash", "findutils", "diffutils", "grep", "sed", "tar", "make", "wget", "gettext-tools", "dpkg", "apt",
)  # fmt: skip
# Stop adding messages to a catalog past this many characters, so that the corpus stays under ~200 KB.
MAX_CHARS_PER_CATALOG = 12_000
_DIRECTIVE = re.compile(r"%(?:\d+\$)?[-+ #0']*(?:\*|\d+)?(?:\.(?:\*|\d+))?(?:hh|h|ll|l|j|z|t|L)?[diouxXeEfFgGcspn%]")
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_PUNCTUATION = "，。：；！？、（）《》“”"
_ACCELERATOR = re.compile(r"\(_[A-Za-z]\)|_(?=[A-Za-z])")


def _wide(character: str) -> bool:
    return bool(_CJK.match(character)) or character in _PUNCTUATION


def join_lines(text: str) -> str:
    """A wrapped message on one line: no space where a CJK character meets a line break, one space otherwise."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    out = ""
    for line in lines:
        if out and not (_wide(out[-1]) and _wide(line[0])):
            out += " "
        out += line
    return out


def clean(message: str) -> str | None:
    """The message as a corpus line, or None when it is not mostly Chinese prose."""
    text = join_lines(_ACCELERATOR.sub("", _DIRECTIVE.sub("", message)))
    text = "".join(c for c in text if unicodedata.category(c) != "Cc")  # the \a of a help text
    text = re.sub(r"\s+", " ", text).strip(" :：")
    visible = [c for c in text if not c.isspace()]
    cjk = sum(bool(_CJK.match(c)) for c in visible)
    if cjk < 6 or cjk < 0.6 * len(visible) or not re.search("[，。；！？]", text):
        return None
    return text


def messages(path: Path) -> list[str]:
    """The cleaned, distinct translations of a catalog, in msgid order (plural forms: each form)."""
    with open(path, "rb") as f:
        catalog = gettext.GNUTranslations(f)._catalog  # msgid (or (msgid, n)) -> msgstr
    seen, out = set(), []
    for key in sorted(catalog, key=str):
        if key == "" or (isinstance(key, tuple) and key[0] == ""):
            continue  # the header
        text = clean(catalog[key])
        if text and text not in seen:
            seen.add(text)
            out.append(text)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--locale-dir", default="/usr/share/locale/zh_CN/LC_MESSAGES")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "plm_toolkit/corpora/zh"))
    args = parser.parse_args()
    train, valid, used = [], [], {}
    for name in CATALOGS:
        path = Path(args.locale_dir) / f"{name}.mo"
        if not path.is_file():
            continue
        lines, size = [], 0
        for text in messages(path):
            if size >= MAX_CHARS_PER_CATALOG:
                break
            lines.append(text)
            size += len(text)
        train.append([t for i, t in enumerate(lines) if i % 10 != 9])
        valid.append([t for i, t in enumerate(lines) if i % 10 == 9])
        used[name] = {"messages": len(lines), "mo_sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {"catalogs": used}
    for file, documents in (("train.txt", train), ("valid.txt", valid)):
        text = "\n\n".join("\n".join(d) for d in documents if d) + "\n"
        (out / file).write_text(text, encoding="utf-8")
        data = text.encode("utf-8")
        report[file] = {"bytes": len(data), "characters": len(text), "sha256": hashlib.sha256(data).hexdigest()}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
