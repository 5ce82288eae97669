"""``blas_held`` limits BLAS's threads from any thread: the first thread that ever set the count
(the main thread, warming a model up) must not be the only one whose limit counts."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from graphrt.kernels.cpu.blas_threads import blas_held

threadpoolctl = pytest.importorskip("threadpoolctl")


def _counts() -> list[int]:
    controller = threadpoolctl.ThreadpoolController().select(user_api="blas")
    return [lib.get_num_threads() for lib in controller.lib_controllers]


def test_a_worker_thread_holds_blas_down_after_the_main_thread_did() -> None:
    original = _counts()
    if not original or max(original) < 2:
        pytest.skip("BLAS runs one thread here: there is nothing to hold down")
    with blas_held(1):  # the main thread sets the count first, as a warm-up run does
        assert _counts() == [1] * len(original)
    assert _counts() == original
    seen: dict[str, Any] = {}

    def work() -> None:
        with blas_held(1):
            seen["inside"] = _counts()
        seen["after"] = _counts()

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    assert seen["inside"] == [1] * len(original)
    assert seen["after"] == original


def test_a_hold_at_or_above_blas_count_sets_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a hold that lowers BLAS's count calls its setter (then once to restore it): the
    two calls were 3.5 us of the 15 a capped module's hold took on every run."""
    from graphrt.kernels.cpu import blas_threads

    original = _counts()
    if not original:
        pytest.skip("no BLAS library is loaded")
    calls: list[int] = []
    real = blas_threads._set_threads
    monkeypatch.setattr(blas_threads, "_set_threads",
                        lambda lib, count: (calls.append(count), real(lib, count)))
    with blas_held(max(original)):
        assert _counts() == original
    assert calls == []
    if max(original) >= 2:
        with blas_held(1), blas_held(2):
            assert _counts() == [1] * len(original)
        assert _counts() == original
        assert calls == [1] * len(original) + [c for c in original if c != 1]
