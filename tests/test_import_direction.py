"""Imports run downhill: a module imports from its own floor or the floors below it, never from one above
(docs/architecture.md). Every import counts, the ones inside functions too: a lazy import still ties the lower
module to the higher one. A new top-level module or package must be given a floor here."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "plm_toolkit"

# The floors, from the ground up: the longest leading part of a module's name below plm_toolkit that a floor lists
# decides its floor (plm_toolkit.data.store.lock: "data.store").
FLOORS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # Import nothing of ours but each other: exceptions, atomic writes, the registries and their loader, the
    # capability names, did-you-mean, the run lock, the checkpoint folder format and the typed schemas; "" is
    # plm_toolkit/__init__.py, corpora/ data.
    ("core", ("", "core", "corpora")),
    # data/, stage by stage (docs/architecture.md): each stage imports only the stages before it; no torch modules
    # but batching's.
    ("data/sources", ("data.sources",)),
    ("data/tokenization", ("data.tokenization",)),
    ("data/store", ("data.store",)),
    ("data/units", ("data.units",)),
    ("data/layouts", ("data.layouts",)),
    ("data/batching", ("data.batching",)),
    # build.py: the one entry point that builds a run's data from every stage.
    ("data", ("data",)),
    # Resolution and validation of a composed config, which calls the registered families' and objectives' own
    # checks through the registry; above data because validation resolves data files and plans.
    ("config", ("config",)),
    # Shared torch blocks; above config because they read its enums (activations).
    ("nn", ("nn",)),
    # Decoding and its scores, which the families serve and objectives and tasks use.
    ("generation", ("generation",)),
    ("models", ("models",)),
    ("objectives", ("objectives",)),
    # Other toolkits' checkpoints: adapters per family (ELECTRA's holds its generator objective) and loaders.
    ("interop", ("interop",)),
    ("training", ("training",)),
    ("tasks", ("tasks",)),
    # One module per command, and the run harness they share.
    ("commands", ("commands",)),
)

# (importer, imported) -> why it may run upward. Keep it short: the test fails when an entry is no longer needed.
ALLOWED: dict[tuple[str, str], str] = {}


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
    parts = module.split(".")[1:]
    for size in range(len(parts), -1, -1):
        place = ".".join(parts[:size])
        for level, (_, members) in enumerate(FLOORS):
            if place in members:
                return level
    raise LookupError(f"{module} has no floor: add {parts[0]!r} to FLOORS in {Path(__file__).name}")


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


def test_the_token_store_imports_none_of_its_side_channels():
    """The token store (data/store/) knows ERNIE's knowledge units (data/units/) only as the side channel that package
    registers under the unit's name (data/store/side_channels.py): units plug into the store, not the reverse."""
    found = [
        f"{importer} (line {line}) imports {imported}"
        for importer, imported, line in imports(module_names())
        if importer.startswith("plm_toolkit.data.store.") and imported.startswith("plm_toolkit.data.units")
    ]
    assert found == []


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
    # data/'s stages are floors of their own, its entry point above them all.
    stages = ["sources.corpus", "tokenization.vocab", "store.lock", "units.words", "layouts.plan", "batching.loader"]
    levels = [floor(f"plm_toolkit.data.{name}") for name in stages]
    assert levels == sorted(set(levels)) and floor("plm_toolkit.data.build") > levels[-1]


def test_no_import_circle():
    """No module reaches itself through imports (the ones inside functions included): a circle hides which of two
    modules is the lower one, and works only while the order of first imports happens to suit it."""
    graph: dict[str, set[str]] = {}
    for importer, imported, _ in imports(module_names()):
        graph.setdefault(importer, set()).add(imported)
    circles = []
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                circles.append(" -> ".join([*path[path.index(nxt) :], nxt]))
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert circles == []
