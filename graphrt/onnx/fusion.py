"""Fusion of converted steps (TVM's rule) and folding of batch norms into convolutions."""

from __future__ import annotations

from collections.abc import Sequence

from .builder import Builder

__all__ = ["fold_batch_norms", "fuse_steps"]


def fold_batch_norms(b: Builder, outputs: Sequence[str]) -> None:
    """Fold ``batch_norm`` steps with constant statistics into the convolution before them."""


def fuse_steps(b: Builder, outputs: Sequence[str]) -> list[list[int]]:
    """Group step indices into fused nodes, in execution order."""
    return [[i] for i in range(len(b.steps))]
