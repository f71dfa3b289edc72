"""Choices of a config field, as OmegaConf validates them, and their text."""

from __future__ import annotations

from enum import Enum
from typing import Any


def choices(name: str, *values: str) -> type[Enum]:
    """A str-valued Enum: OmegaConf validates it and lists the valid values (it has no Literal support)."""
    return Enum(name, {v: v for v in values}, type=str)


def choice(value: Any) -> str:
    """The string of a config choice, whether it arrives as a str-Enum (structured config) or a plain str."""
    return value.value if isinstance(value, Enum) else str(value)
