"""The job protocol of the compiled host kernels (graphrt.kernels.cpu.job_protocol): the calling
thread claims jobs from the front and helpers from the back, every job exactly once, and each
thread counts its jobs done once, after its last."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

import numba

from graphrt.kernels.cpu import crew
from graphrt.kernels.cpu.job_protocol import GUIDED, JOBS, claim, done, finish, flat, ring

RNG = np.random.default_rng(7)


@pytest.mark.parametrize("total", [1, 7, 64, 1000])
def test_the_caller_claims_from_the_front_and_helpers_from_the_back(total: int) -> None:
    counters = np.zeros(2, np.int64)
    taken = np.zeros(total, np.int64)
    front, back = 0, total
    while True:
        caller, grain = bool(RNG.integers(2)), int(RNG.integers(1, 9))
        first, last = claim(counters, 0, grain, total, caller)
        if first >= last:
            break
        assert last - first <= grain
        if caller:  # the caller's ranges follow one another up from 0
            assert first == front
            front = last
        else:  # the helpers' ranges follow one another down from the end
            assert last == back
            back = first
        taken[first:last] += 1
    assert front == back
    np.testing.assert_array_equal(taken, 1)
    assert claim(counters, 0, 4, total, True) == (total, total)  # and stays so


def test_guided_claims_take_a_share_of_the_jobs_left_down_to_the_grain() -> None:
    """Two threads (the count in the grain's high 32 bits, as the crew puts it): each claim
    takes a quarter of what is left, at least the grain, so 120 jobs take 18 claims."""
    counters = np.zeros(2, np.int64)
    grain = 1 | GUIDED | 2 << 32
    sizes, caller = [], True
    while True:
        first, last = claim(counters, 0, grain, 120, caller)
        if first >= last:
            break
        sizes.append(last - first)
        caller = not caller
    assert sizes[:4] == [30, 22, 17, 12] and sizes[-1] == 1 and sum(sizes) == 120
    assert len(sizes) == 18
    assert claim(np.zeros(2, np.int64), 0, 5 | GUIDED | 2 << 32, 12, True) == (0, 5)  # least
    assert claim(np.zeros(2, np.int64), 0, 3 | GUIDED, 120, True) == (0, 3)  # one thread
    assert claim(np.zeros(2, np.int64), 0, 3 | 2 << 32, 120, True) == (0, 3)  # not guided


@numba.njit(numba.types.boolean(flat(numba.types.int64), numba.types.int64, *JOBS),
            nogil=True)
def _tally_jobs(owner: np.ndarray, work: int, counters: np.ndarray, grain: int,
                bell: np.ndarray, caller: bool, call: int, spins: int) -> bool:
    """Marks each job with the thread that ran it (1 the caller, 2 a helper), after ``work``
    steps of busy work a job."""
    if caller:
        ring(bell)
    total = owner.shape[0]
    mine = 0
    while True:
        first, last = claim(counters, 0, grain, total, caller)
        if first >= last:
            break
        for job in range(first, last):
            spent = 0.0
            for step in range(work):
                spent += step * 1e-9
            owner[job] += (1 if caller else 2) + int(spent > 1e9)
        mine += last - first
    done(counters, 0, mine)
    return finish(counters, total, bell, caller, call, spins)


def test_threads_claiming_at_once_run_every_job_once_the_caller_from_the_front() -> None:
    both = 0
    for _ in range(10):  # (on a busy machine one thread may miss a few calls)
        owner = np.zeros(400, np.int64)
        crew.run_jobs(_tally_jobs, True, (owner, 20_000, np.zeros(2, np.int64), 2))
        assert set(np.unique(owner)) <= {1, 2}  # each job once, by one thread
        mine, theirs = np.flatnonzero(owner == 1), np.flatnonzero(owner == 2)
        if mine.size:  # the caller's: one prefix
            assert mine[0] == 0 and np.all(np.diff(mine) == 1)
        if theirs.size:  # the helpers': one suffix
            assert theirs[-1] == owner.size - 1 and np.all(np.diff(theirs) == 1)
        both += bool(mine.size and theirs.size)
    assert both or crew.available_cores() == 1  # (a helper joins 10 ms of jobs in time)


def test_guided_calls_on_the_crew_run_every_job_once() -> None:
    for _ in range(10):
        owner = np.zeros(400, np.int64)
        crew.run_jobs(_tally_jobs, True, (owner, 2_000, np.zeros(2, np.int64), 1 | GUIDED))
        assert set(np.unique(owner)) <= {1, 2}
        mine = np.flatnonzero(owner == 1)
        if mine.size:
            assert mine[0] == 0 and np.all(np.diff(mine) == 1)


def test_the_caller_alone_runs_every_job_in_order() -> None:
    owner = np.zeros(50, np.int64)
    crew.run_jobs(_tally_jobs, False, (owner, 10, np.zeros(2, np.int64), 3))
    np.testing.assert_array_equal(owner, 1)
