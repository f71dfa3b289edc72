"""Imports run downhill: a module imports from its own floor or the floors below it, never from one above
(docs/architecture.md). Every import counts, the ones inside functions too: a lazy import still ties the lower
module to the higher one. A new top-level module or package must be given a floor here."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "plm_toolkit"

# The floors, from the ground up: the first part of a module's name below plm_toolkit decides its floor.
FLOORS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # Import nothing of ours but each other: exceptions, atomic writes, the registries and their loader, the
    # capability names, did-you-mean, the checkpoint folder format; "" is plm_toolkit/__init__.py, corpora/ data.
    (
        "ground",
        ("", "errors", "atomic", "registry", "catalog", "capabilities", "names", "checkpoint", "run_lock", "corpora"),
    ),
    # Readers, tokenizers, layouts and the loader; no torch modules.
    ("data", ("data",)),
    # The typed configs (Hydra's ConfigStore) and the generic validation, which calls the registered families' and
    # objectives' own checks through the registry; above data because validation resolves data files and plans.
    ("config", ("config",)),
    # Shared torch blocks; above config because they read its enums (activations).
    ("nn", ("nn",)),
    # Decoding and its scores, which the families serve and objectives and tasks use.
    ("decoding", ("decoding", "text_metrics")),
    ("models", ("models",)),
    ("objectives", ("objectives",)),
    # Other toolkits' checkpoints: adapters per family (ELECTRA's holds its generator objective) and loaders.
    ("interop", ("interop",)),
    ("training", ("training",)),
    ("tasks", ("tasks",)),
    (
        "commands",
        (
            "cli",
            "failures",
            "train",
            "prepare",
            "finetune",
            "generate",
            "export",
            "embed",
            "average",
            "glue",
            "glue_runs",
            "glue_schedule",
            "glue_summary",
        ),
    ),
)

# (importer, imported) -> why it may run upward. Keep it short: the test fails when an entry is no longer needed.
ALLOWED = {
    ("plm_toolkit.config.reference", "plm_toolkit.commands.generate"): (
        "reference.py writes docs/configuration.md and runs as a command (python -m plm_toolkit.config.reference); "
        "plm-generate's top-level keys are a dataclass that extends decoding's options and lives with its command"
    ),
}


def module_names() -> dict[str, Path]:
    names = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = ("plm_toolkit", *path.relative_to(PACKAGE).with_suffix("").parts)
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def imports(modules: dict[str, Path]):
    """(importer, imported module, line) of every import of ours, relative ones resolved and ``from package
    import module`` read as the module."""
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parts, *([node.module] if node.module else [])])
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            for target in targets:
                if target.split(".")[0] == "plm_toolkit" and target != name:
                    yield name, target, node.lineno


def floor(module: str) -> int:
    first = module.split(".")[1] if "." in module else ""
    for level, (_, members) in enumerate(FLOORS):
        if first in members:
            return level
    raise LookupError(f"{module} has no floor: add {first!r} to FLOORS in {Path(__file__).name}")


def upward_imports() -> dict[tuple[str, str], list[int]]:
    """(importer, imported) -> the lines of every import that runs upward."""
    found: dict[tuple[str, str], set[int]] = {}
    for importer, imported, line in imports(module_names()):
        if floor(imported) > floor(importer):
            found.setdefault((importer, imported), set()).add(line)
    return {pair: sorted(lines) for pair, lines in found.items()}


def test_every_module_has_a_floor():
    unplaced = []
    for module in module_names():
        try:
            floor(module)
        except LookupError as err:
            unplaced.append(str(err))
    assert not unplaced, unplaced


def test_imports_run_downhill():
    upward = upward_imports()

    def describe(pair: tuple[str, str]) -> str:
        importer, imported = pair
        lines = ", ".join(str(n) for n in upward[pair])
        below, above = FLOORS[floor(importer)][0], FLOORS[floor(imported)][0]
        return f"{importer} ({below}, line {lines}) imports {imported} ({above})"

    assert [describe(pair) for pair in upward if pair not in ALLOWED] == []
    assert [pair for pair in ALLOWED if pair not in upward] == [], "ALLOWED lists an import that runs downhill now"


def test_the_check_sees_imports_inside_functions(tmp_path):
    """The parser behind the check: a lazy import and a relative one are both found and resolved."""
    source = "from . import checkpoint\n\ndef f():\n    from plm_toolkit.tasks.ner import entities\n"
    (tmp_path / "x.py").write_text(source)
    (tmp_path / "checkpoint.py").write_text("")
    modules = {"plm_toolkit.data.x": tmp_path / "x.py", "plm_toolkit.data.checkpoint": tmp_path / "checkpoint.py"}
    found = list(imports(modules))
    assert found == [
        ("plm_toolkit.data.x", "plm_toolkit.data.checkpoint", 1),
        ("plm_toolkit.data.x", "plm_toolkit.tasks.ner", 4),
    ]
    assert floor("plm_toolkit.tasks.ner") > floor("plm_toolkit.data.x")
