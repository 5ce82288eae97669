"""The scratch layout of a node's intermediates: first fit by offset, bytes reused once their
last reader has run, in near-linear time."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

import graphrt
from graphrt.storage import ScratchNeed, plan_scratch
from graphrt.storage.scratch import _align, _layout


def first_fit(needs: Sequence[ScratchNeed]) -> tuple[tuple[int, ...], int]:
    """The layout by definition (the planner before it was made near-linear): place each
    intermediate, by first call then size, at the lowest offset where it fits between the
    blocks still live."""
    order = sorted(range(len(needs)), key=lambda i: (needs[i].first, -needs[i].nbytes))
    offsets = [0] * len(needs)
    live: list[tuple[int, int, int]] = []
    peak = 0
    for i in order:
        need = needs[i]
        live = [block for block in live if block[2] >= need.first]
        size = _align(need.nbytes)
        offset = 0
        for start, length, _ in live:
            if start - offset >= size:
                break
            offset = max(offset, start + length)
        offsets[i] = offset
        live.append((offset, size, need.last))
        live.sort()
        peak = max(peak, offset + size)
    return tuple(offsets), peak


@pytest.mark.parametrize("seed", range(8))
def test_the_layout_is_first_fit_by_offset(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(500):
        calls = rng.randint(1, 30)
        needs = []
        for _ in range(rng.randint(0, 40)):
            first = rng.randint(0, calls - 1)
            last = rng.randint(first, min(calls - 1, first + rng.randint(0, 8)))
            nbytes = rng.choice([0, 1, 64, 100, 128, 256, 1000, rng.randint(0, 9000)])
            needs.append(ScratchNeed(nbytes, first, last))
        assert _layout(needs) == first_fit(needs), needs


def test_many_intermediates_live_at_once_are_laid_out_end_to_end() -> None:
    """A split into 20,000 values, all live to the end: each goes after the last, found
    without rescanning the live blocks (the old planner's rescans took 89 s here; the figure
    is in the commit that made it near-linear, not asserted)."""
    needs = [ScratchNeed(100, index, 30_000) for index in range(20_000)]
    offsets, peak = _layout(needs)
    assert offsets == tuple(range(0, 20_000 * 128, 128)) and peak == 20_000 * 128
    cpu = graphrt.cpu(0)
    plan = plan_scratch({0: needs}, [cpu])
    assert plan.arena[cpu] == peak
