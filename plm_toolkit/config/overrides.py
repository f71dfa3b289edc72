"""Text typed on the command line, for the keys that hold text.

Hydra parses an unquoted value before it knows the key's type: ``prompt=1e3`` becomes the float 1000.0, which the
string field then stores as "1000.0"; ``prompt=true`` becomes "True", ``task.labels=[false,true]`` the labels "False"
and "True", ``prompt=1_000`` "1000". ``keep_typed_text`` puts back what was typed, for every string key (and list of
strings) that the command line set; ``quoting_hint`` says how to quote a value that Hydra's grammar cannot parse at
all (a comma, an apostrophe, ``<``).
"""

from __future__ import annotations

from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.nodes import StringNode

# A value Hydra turned into something other than text.
_PARSED = (bool, int, float)


def keep_typed_text(cfg: DictConfig, overrides: list[str] | None = None) -> None:
    """Set every string key that ``overrides`` (default: the command line Hydra composed ``cfg`` from) gave an
    unquoted number or true/false to the text as typed; the same for such elements of a list of strings."""
    if overrides is None:
        if not HydraConfig.initialized():
            return
        overrides = list(HydraConfig.get().overrides.task)
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException:  # Hydra accepted them when it composed; nothing to do if they no longer parse
        return
    for override in parsed:
        if override.is_delete() or override.is_sweep_override() or override.is_hydra_override():
            continue
        parent_key, _, leaf = override.key_or_group.rpartition(".")
        parent = OmegaConf.select(cfg, parent_key) if parent_key else cfg
        if not isinstance(parent, DictConfig) or leaf not in parent:
            continue
        node, value = parent._get_node(leaf), override.value()
        typed = override.input_line.split("=", 1)[1].strip()
        if isinstance(node, StringNode) and isinstance(value, _PARSED):
            parent[leaf] = typed
        elif isinstance(node, ListConfig) and node._metadata.element_type is str and isinstance(value, list):
            texts = list_elements(typed)
            if len(texts) == len(value):
                parent[leaf] = [t if isinstance(v, _PARSED) else v for v, t in zip(value, texts, strict=True)]


def list_elements(text: str) -> list[str]:
    """The elements of a typed list ``[a, 'b, c', [d]]`` as typed (quotes and nested brackets kept whole)."""
    inner = text.strip()
    if not (inner.startswith("[") and inner.endswith("]")):
        return []
    elements, current, depth, quote = [], "", 0, None
    for char in inner[1:-1]:
        if quote:
            quote = None if char == quote and not current.endswith("\\") else quote
        elif char in "'\"":
            quote = char
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        elif char == "," and depth == 0:
            elements.append(current.strip())
            current = ""
            continue
        current += char
    return [*elements, current.strip()] if current.strip() or elements else []


def quoting_hint(override: str) -> str:
    """How to give ``key=value`` so that Hydra reads the value as text: quoted for Hydra inside quotes for the
    shell; for a prompt, also the file that takes any text."""
    key, _, value = override.partition("=")
    if '"' not in value:
        hydra_text = f'"{value}"'
    elif "'" not in value:
        hydra_text = f"'{value}'"
    else:
        hydra_text = '"' + value.replace('"', '\\"') + '"'
    typed = f"{key}={hydra_text}"
    # The shell's single quotes keep everything but a single quote; inside double quotes \ " $ ` need a backslash.
    shell = f"'{typed}'" if "'" not in typed else '"' + "".join("\\" + c if c in '\\"$`' else c for c in typed) + '"'
    hint = f"to give it as text, quote it for Hydra inside the shell's quotes: {shell}"
    if key.lstrip("+~") == "prompt":
        hint += ", or put the prompt in a file: prompts_file=PATH (one prompt per line, any text)"
    return hint
