"""Every scripts/ command line shown in README.md, docs/, a script's own usage text or scripts/gpu_check.sh parses
with that script's argument parser, including those that only a GPU can run: a renamed or removed flag in a
documented command fails here. Parsing only: each script is stopped right after its parser has accepted the line."""

from __future__ import annotations

import argparse
import importlib.util
import re
import shlex
import sys

import pytest

from tests.scripts import SCRIPTS

REPO = SCRIPTS.parent
SOURCES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted(SCRIPTS.iterdir())]
SCRIPT = re.compile(r"^(?:\S*/)?scripts/(\w+\.(?:py|sh))$")
# Where a command line ends in a shell line: a redirection, a pipe, a second command.
END = {">", "2>", ">>", "|", "&&", "||", ";"}
FENCE = re.compile(r"^```.*?$(.*?)^```", re.S | re.M)
# Inline code in prose that runs a script with arguments (a bare `scripts/x.py` only names it).
INLINE = re.compile(r"(?<!`)`([^`]*scripts/\w+\.(?:py|sh) [^`]+)`(?!`)")


def joined(text: str) -> list[str]:
    return text.replace("\\\n", " ").splitlines()


def lines_of(path) -> list[str]:
    """The shell lines of a file: a Markdown file's code blocks and inline code, a script's usage lines (the
    indented lines of its docstring), every line of a shell script."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".md":
        prose = FENCE.sub("", text)
        return [line for m in FENCE.finditer(text) for line in joined(m.group(1))] + [
            m.group(1).replace("\n", " ") for m in INLINE.finditer(prose)
        ]
    if path.suffix == ".py":
        docstring = text.split('"""')[1] if text.startswith('"""') else ""
        return [line for line in joined(docstring) if line.startswith("    ")]
    return joined(text)


def commands_in(line: str) -> list[tuple[str, list[str]]]:
    """(script name, arguments) of each script run on a line."""
    try:
        words = shlex.split(line, comments=True)
    except ValueError:
        return []
    found = []
    for i, word in enumerate(words):
        if m := SCRIPT.match(word):
            args = []
            for arg in words[i + 1 :]:
                if arg in END or arg.startswith((">", "2>")):
                    break
                args.append(re.sub(r"\$\{?\w+\}?", "1", arg))  # a shell variable: a loop's number, a folder
            found.append((m.group(1), args))
    return found


def documented() -> list[tuple[str, str, list[str]]]:
    out, seen = [], set()
    for source in SOURCES:
        if source.suffix not in (".md", ".py", ".sh"):
            continue
        for line in lines_of(source):
            for name, args in commands_in(line):
                if (name, *args) not in seen and (SCRIPTS / name).is_file():
                    seen.add((name, *args))
                    out.append((f"{source.name}: {name} {' '.join(args)}", name, args))
    return out


COMMANDS = documented()


class Parsed(Exception):
    """Raised once the script's parser has accepted the arguments."""


def parse_only(name: str, args: list[str], monkeypatch) -> None:
    """Run scripts/<name> with ``args`` up to its argument parsing (a bad flag exits with status 2)."""
    original = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, argv=None, namespace=None):
        original(self, args, namespace)
        raise Parsed

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
    monkeypatch.setattr(sys, "argv", [str(SCRIPTS / name), *args])
    monkeypatch.syspath_prepend(str(SCRIPTS))
    spec = importlib.util.spec_from_file_location(f"documented_{name[:-3]}", SCRIPTS / name)
    module = importlib.util.module_from_spec(spec)
    with pytest.raises(Parsed):
        spec.loader.exec_module(module)  # a script that parses at import time stops here
        module.main()


def test_the_docs_show_a_command_of_every_script():
    shown = {name for _, name, _ in COMMANDS}
    # Modules of other scripts: bench_pretrain.py --model gpt2|t5 runs the first three; bert_runners.py holds the BERT
    # runners of bench_pretrain.py and gemm_share.py.
    modules = {"side_by_side.py", "bench_gpt2.py", "bench_t5.py", "bert_runners.py"}
    assert {p.name for p in SCRIPTS.iterdir() if p.suffix in (".py", ".sh")} - modules <= shown


PYTHON = [c for c in COMMANDS if c[1].endswith(".py")]


@pytest.mark.parametrize(("where", "name", "args"), PYTHON, ids=[c[0] for c in PYTHON])
def test_documented_script_command_parses(where, name, args, monkeypatch):
    parse_only(name, args, monkeypatch)


def test_gpu_check_parts_shown_in_the_docs_exist():
    text = (SCRIPTS / "gpu_check.sh").read_text(encoding="utf-8")
    parts = set(re.findall(r"\$part == (\w+)", text))
    for where, name, args in COMMANDS:
        if name == "gpu_check.sh":
            assert len(args) in (1, 2) and set(args[1:]) <= parts, where


def test_a_stale_flag_is_caught(monkeypatch):
    with pytest.raises(SystemExit):
        parse_only("bench_translation.py", ["--minutes", "3", "--test-pairs", "300"], monkeypatch)
