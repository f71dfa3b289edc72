"""Name -> (typed config, builder) registries for models, objectives and fine-tuning tasks.

Each entry's config dataclass is stored in Hydra's ConfigStore under ``schema/<kind>/<name>`` so that the YAML
presets in ``configs/<kind>/`` extend it (``defaults: [/schema/model/bert@_here_]``) and every key is typed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from hydra.core.config_store import ConfigStore

T = TypeVar("T")


@dataclass(frozen=True)
class Entry(Generic[T]):
    name: str
    config_cls: type
    builder: Callable[..., T]
    # Extra facts a registry keeps per entry, e.g. the class behind a builder that is a function (``cls``).
    info: dict[str, Any] = field(default_factory=dict)


class Registry(Generic[T]):
    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, Entry[T]] = {}

    def register(self, name: str, config_cls: type, **info: Any) -> Callable[[Callable[..., T]], Callable[..., T]]:
        """Decorator: ``@MODELS.register("bert", BertConfig)`` over the builder (a class or a function)."""

        def wrap(builder: Callable[..., T]) -> Callable[..., T]:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._entries[name] = Entry(name, config_cls, builder, dict(info))
            ConfigStore.instance().store(group=f"schema/{self.kind}", name=name, node=config_cls)
            return builder

        return wrap

    def get(self, name: str) -> Entry[T]:
        if name not in self._entries:
            valid = ", ".join(sorted(self._entries))
            raise KeyError(f"unknown {self.kind} {name!r}; valid {self.kind}s: {valid}")
        return self._entries[name]

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: str) -> bool:
        return name in self._entries


MODELS: Registry = Registry("model")
OBJECTIVES: Registry = Registry("objective")
TASKS: Registry = Registry("task")
