"""Every plm-train / plm-finetune / plm-generate / plm-embed command that README.md, docs/, the configs' comments and
the modules' usage lines show composes and validates as written: a key renamed or removed, an option dropped, a
value Hydra's grammar refuses, or a combination the config rules refuse (both trainer.max_steps and trainer.epochs)
fails here instead of in a reader's shell. Nothing is trained: the overrides go through Hydra's composition and the
commands' own validation; paths in the commands (placeholders such as PATH or runs/t5) are swapped for empty files
and folders before validation, which checks that they exist."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf, open_dict

import plm_toolkit.commands.generate  # noqa: F401  (stores plm-generate's schema)
from plm_toolkit.commands.glue.command import glue_problems
from plm_toolkit.config.lengths import steps_over_epochs
from plm_toolkit.config.validate import unknown_keys, validate

REPO = Path(__file__).resolve().parents[1]
# README and docs/, the configs' comments, the usage lines at the top of the package's modules.
SOURCES = [
    REPO / "README.md",
    *sorted((REPO / "docs").glob("*.md")),
    *sorted((REPO / "configs").rglob("*.yaml")),
    *sorted((REPO / "plm_toolkit").rglob("*.py")),
]
# The console commands that compose a Hydra config, by the config they compose.
CONFIGS = {
    "plm-train": "train",
    "plm-finetune": "finetune",
    "plm-generate": "generate",
    "plm-embed": "embed",
    "plm-glue": "glue",
    "plm-prepare": "prepare",
}
FENCE = re.compile(r"^```.*?$(.*?)^```", re.S | re.M)
INLINE = re.compile(r"`((?:plm-train|plm-finetune|plm-generate|plm-embed|plm-glue|plm-prepare)(?: [^`]*)?)`")


def shell_text(path: Path) -> str:
    """The file with every line that is not shell blanked (line numbers kept): a Markdown file's code blocks, a
    YAML file's comments (without the #), a module's docstring."""
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    if path.suffix == ".md":
        keep = {text.count("\n", 0, i) for m in FENCE.finditer(text) for i in range(m.start(1), m.end(1))}
        return "\n".join(line if n in keep else "" for n, line in enumerate(lines))
    if path.suffix == ".yaml":
        return "\n".join(line.strip()[1:] if line.strip().startswith("#") else "" for line in lines)
    end = text.find('"""', 3) if text.startswith('"""') else 0
    return "\n".join(line if text.count("\n", 0, end) >= n else "" for n, line in enumerate(lines))


def logical_lines(block: str) -> list[tuple[int, str]]:
    """A shell block's lines with backslash continuations joined, each with the offset where it starts."""
    return [(m.start(), m.group().replace("\\\n", " ")) for m in re.finditer(r"(?:[^\n]*\\\n)*[^\n]+", block)]


def command_of(line: str) -> tuple[str, list[str]] | None:
    """(config name, arguments) of a line that runs one of the commands (directly, under srun or torchrun), else
    None."""
    try:
        words = shlex.split(line, comments=True)
    except ValueError:  # not shell (a layout tree, a YAML snippet)
        return None
    if words[:1] == ["srun"]:
        words = words[1:]
    if words[:1] == ["torchrun"] and "plm_toolkit.commands.train" in words:
        return "train", words[words.index("plm_toolkit.commands.train") + 1 :]
    if words and words[0] in CONFIGS:
        return CONFIGS[words[0]], words[1:]
    return None


def documented_commands() -> list[tuple[str, str, list[str]]]:
    """(where, config name, arguments) of every distinct command in ``SOURCES``. Inline code names a command in
    passing (`plm-finetune task=ner`), so its arguments get "..." appended: the rest is the reader's."""
    found, seen = [], set()
    for path in SOURCES:
        shell = shell_text(path)
        lines = [(shell.count("\n", 0, at) + 1, line) for at, line in logical_lines(shell)]
        if path.suffix == ".md":
            text = path.read_text(encoding="utf-8")
            lines += [(text.count("\n", 0, m.start(1)) + 1, m.group(1) + " ...") for m in INLINE.finditer(text)]
        for number, line in lines:
            parsed = command_of(line)
            if parsed is not None and (parsed[0], *parsed[1]) not in seen:
                seen.add((parsed[0], *parsed[1]))
                found.append((f"{path.relative_to(REPO)}:{number}: {line.strip()}", *parsed))
    return found


def overrides_of(args: list[str]) -> list[str]:
    """The config overrides of a command line (Hydra's own settings, run directory and launcher, included): flags
    (-m, --cfg job, --help) and "..." dropped; a sweep (a=1,2) becomes its first value."""
    kept = []
    skip_next = False
    for arg in args:
        if skip_next:
            skip_next = False
        elif arg == "--cfg":
            skip_next = True
        elif arg.startswith("-") or arg == "...":
            continue
        else:
            kept.append(arg)
    out = []
    for parsed, text in zip(OverridesParser.create().parse_overrides(kept), kept, strict=True):
        if parsed.is_sweep_override():
            key = text.split("=", 1)[0]
            text = f"{key}={next(parsed.sweep_string_iterator())}"
        out.append(text)
    return out


def compose_command(config: str, overrides: list[str]):
    """The command's config; Hydra's own section (where the hydra.* overrides land) is composed, then dropped."""
    if any(o.startswith("hydra/launcher=submitit") for o in overrides):
        pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    with initialize_config_module(config_module="plm_toolkit.configs", version_base="1.3"):
        cfg = compose(config, overrides=overrides, return_hydra_config=True)
    if config == "finetune":  # as plm-finetune does before validating
        steps_over_epochs(cfg, cfg.hydra.overrides.task)
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg


def stand_in(root: Path, value: str, suffixes: tuple[str, ...] = ()) -> str:
    """An existing empty file named like ``value`` (and ``value.<suffix>`` beside it: a parallel corpus's prefix)."""
    path = root / re.sub(r"[^\w.-]", "_", value)
    path.touch()
    for suffix in suffixes:
        path.with_name(f"{path.name}.{suffix}").touch()
    return str(path)


def with_stand_ins(cfg, root: Path, elided: bool = False):
    """``cfg`` with every file and folder it names replaced by an existing one under ``root``; a finetune command
    shown with "..." (the reader adds the rest) also gets a backbone and a training file where it names none."""
    folder = root / "folder"
    folder.mkdir(exist_ok=True)
    with open_dict(cfg):
        if "glue" in cfg:
            cfg.model.checkpoint, cfg.data.glue_dir = str(folder), str(folder)
            return cfg
        if "task" in cfg:
            if elided or not OmegaConf.is_missing(cfg.model, "checkpoint"):
                cfg.model.checkpoint = str(folder)
            langs = tuple(cfg.task[k] for k in ("source_lang", "target_lang") if k in cfg.task)
            for key in ("train_file", "validation_file"):
                if cfg.data[key] or (elided and key == "train_file"):
                    cfg.data[key] = stand_in(root, cfg.data[key] or "train", langs)
            for key in ("kb_triples", "kb_names"):  # task=kbqa's knowledge base
                if cfg.task.get(key) or (elided and key in cfg.task):
                    cfg.task[key] = stand_in(root, cfg.task[key] or key)
            return cfg
        langs = tuple(cfg.data[k] for k in ("source_lang", "target_lang") if k in cfg.data)
        for key in ("train_files", "validation_files"):
            cfg.data[key] = [stand_in(root, f, langs) for f in cfg.data[key]]
        for source in cfg.data.get("sources") or []:  # a blend's corpora (data.sources)
            source.files = [stand_in(root, f) for f in source.files]
            source.validation_files = [stand_in(root, f) for f in source.validation_files]
        if cfg.data.dataset_path:
            cfg.data.dataset_path = str(folder)
        if cfg.data.tokenizer.path:  # the tokenizer of a Megatron-LM or nanoGPT token file
            cfg.data.tokenizer.path = stand_in(root, cfg.data.tokenizer.path)
        for key in ("entity_gazetteer", "phrase_lexicon"):
            if cfg.objective.get(key):
                cfg.objective[key] = stand_in(root, cfg.objective[key])
        if cfg.objective.get("entity_tagger"):  # validation reads the tagger's task from its config.yaml
            tagger = root / "tagger"
            tagger.mkdir(exist_ok=True)
            (tagger / "model.safetensors").touch()
            (tagger / "config.yaml").write_text("task: {name: ner, labels: [O, B-PER, I-PER]}\n")
            cfg.objective.entity_tagger = str(tagger)
    return cfg


COMMANDS = documented_commands()


def test_the_docs_show_commands_of_every_kind():
    kinds = {config for _, config, _ in COMMANDS}
    assert kinds == set(CONFIGS.values()), kinds
    assert len(COMMANDS) >= 50


@pytest.mark.parametrize(("where", "config", "args"), COMMANDS, ids=[c[0].split(": ")[0] for c in COMMANDS])
def test_documented_command_composes_and_validates(where, config, args, tmp_path):
    cfg = compose_command(config, overrides_of(args))
    if config in ("generate", "embed"):  # their checks read the checkpoint; the keys are what can go stale here
        assert unknown_keys(cfg) == [], where
        return
    if config == "glue":  # its own keys here; each sub-run's plm-finetune config is validated once planned
        assert unknown_keys(cfg) == [] and glue_problems(with_stand_ins(cfg, tmp_path)) == [], where
        return
    validate(with_stand_ins(cfg, tmp_path, elided="..." in args))


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("plm-train trainer.max_step=5   # a key that is not there", "max_step"),
        ("plm-finetune task=sst2 model.checkpoint=PATH trainer.max_steps=3 trainer.epochs=2", "trainer.epochs"),
        ("plm-train model=bert_huge", "bert_huge"),
        (
            "plm-train -m hydra/launcher=submitit_slurm hydra.launcher.additional_parameters='{requeue: true}'",
            "requeue",
        ),
    ],
)
def test_a_stale_command_is_caught(line, expected, tmp_path):
    config, args = command_of(line)
    with pytest.raises(Exception, match=expected):
        validate(with_stand_ins(compose_command(config, overrides_of(args)), tmp_path))


def test_command_lines_are_read_as_a_shell_reads_them():
    block = "plm-train model=t5 data.train_files=[a.txt] \\\n    hydra.run.dir=runs/t5   # comment\n"
    ((_, line),) = logical_lines(block)
    assert command_of(line) == ("train", ["model=t5", "data.train_files=[a.txt]", "hydra.run.dir=runs/t5"])
    assert command_of("torchrun --nproc_per_node 8 -m plm_toolkit.commands.train hardware=ddp") == (
        "train",
        ["hardware=ddp"],
    )
    assert overrides_of(["-m", "optimizer.lr=1e-4,3e-4", "--cfg", "job", "...", "hydra.run.dir=x"]) == [
        "optimizer.lr=0.0001",
        "hydra.run.dir=x",
    ]
    assert OmegaConf.is_missing(compose_command("finetune", []).model, "checkpoint")
