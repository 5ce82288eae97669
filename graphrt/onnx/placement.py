"""Placement of converted steps on device types."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .builder import Builder

__all__ = ["place_steps"]


def place_steps(b: Builder, groups: Sequence[Sequence[int]], devices: Sequence[str],
                overrides: Mapping[str, str]) -> list[dict[str, Any]]:
    """Give every step a device type; returns one decision per group."""
    for step in b.steps:
        step.device = devices[0]
    return [{"group": i, "device": devices[0]} for i in range(len(groups))]
