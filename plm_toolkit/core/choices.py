"""Choices of a config field, as OmegaConf validates them."""

from __future__ import annotations

from enum import Enum


def choices(name: str, *values: str) -> type[Enum]:
    """A str-valued Enum: OmegaConf validates it and lists the valid values (it has no Literal support)."""
    return Enum(name, {v: v for v in values}, type=str)
