"""What the token store asks of a per-token side channel: a code beside every id (the shard's ``units`` column,
``data/store/token_store.py``) that a package above the store's own code finds, for a unit kind of its own. ERNIE's
knowledge units (and whole-word masking's words) are one: unit ``units``, registered by ``data/units/__init__.py``.

The store imports none of those packages. A package registers its channel when it is imported, as the
"module:attribute" path of the channel, imported the first time a store of that unit is asked for: registering costs
nothing, so that a worker process which imports the package for its encoder pulls in nothing else. The shard workers
look nothing up: the preparation hands each one the channel's encoder (pickled into a spawned worker, which imports
its module by name).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Protocol


class ShardEncoder(Protocol):
    """Writes the sentences of one piece with their codes, in a worker process (or in the preparing one)."""

    # True when it must run in the preparing process (it holds a model): the pieces are then coded one at a time.
    main_process_only: bool

    def start(self, source: str) -> None:
        """A piece of the file ``source`` begins: what the shard adds up starts from nothing."""

    def encode(self, batch: list[tuple[str, bool]], writer: Any, tokenizer: Any) -> None:
        """Write ``batch`` ((text, ends) of documents or their fragments) with the ``writer`` (``ShardWriter``), each
        sentence tokenized alone with ``tokenizer`` and given its codes."""

    def finish(self, stem: Path) -> None:
        """Write what the shard ``stem`` adds up beside it (before its index: a finished shard has it)."""


class SideChannel(Protocol):
    """A unit kind of the store that carries codes beside the ids, and what decides them."""

    # What a store of this unit holds, in words (the message about a store that holds another unit).
    description: str
    # Why a store of this unit is prepared on one node (data.prepare_parts is refused), or "" where it may be split.
    one_node: str

    def settings(self, sources: Any) -> dict:
        """Every setting of ``sources`` (the objective's keys) that changes the codes: part of the store's settings,
        which key its folder."""

    def difference(self, have: Any, wanted: dict) -> str:
        """What a store whose settings are ``have`` holds, against a run's ``wanted``: "holds ... than this run's"."""

    def encoder(self, folder: Path, data_cfg: Any, plan: dict, sources: Any, processes: int) -> ShardEncoder:
        """The encoder of a store's pieces (``plan``: the preparation's plan; ``processes``: the workers it may use
        to learn from the training split first, keeping what it learns in ``folder``)."""

    def summary(self, folder: Path, split: str, shards: int, sources: list[str]) -> dict:
        """What the ``shards`` of ``split`` added up, for the manifest (a DataError where ``sources`` hold nothing to
        code)."""


_CHANNELS: dict[str, str | SideChannel] = {}


def register_side_channel(unit: str, channel: str | SideChannel) -> None:
    """Make ``channel`` (or its "module:attribute" path, imported on first use) the side channel of ``unit``."""
    _CHANNELS[unit] = channel


def side_channel(unit: str) -> SideChannel | None:
    """The side channel registered for ``unit``, or None."""
    channel = _CHANNELS.get(unit)
    if isinstance(channel, str):
        module, _, name = channel.partition(":")
        channel = _CHANNELS[unit] = getattr(importlib.import_module(module), name)
    return channel
