"""One thread count for a module's cpu work (``create(threads=N)`` or ``GRAPHRT_THREADS``):
the helper crew, numpy's BLAS and the inter-op lanes all keep to it, and the results do not
change."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from builders import GraphBuilder

import graphrt
from graphrt.kernels.cpu import crew
from graphrt.kernels.cpu.blas_threads import blas_held
from tests.executor.test_parallel_branches import branches_graph, library

threadpoolctl = pytest.importorskip("threadpoolctl")


def _blas_threads() -> int:
    return max(info["num_threads"] for info in threadpoolctl.threadpool_info()
               if info["user_api"] == "blas")


def _probe_graph() -> dict[str, Any]:
    g = GraphBuilder()
    x = g.input("x", [4])
    return g.build([g.op("probe", "probe", [x], shape=[4])])


def _probed(**options: Any) -> tuple[graphrt.GraphModule, list[tuple[int, int]]]:
    """A module whose one kernel records (BLAS threads, helpers allowed) as it runs."""
    seen: list[tuple[int, int]] = []

    def probe(x: np.ndarray, out: np.ndarray) -> None:
        seen.append((_blas_threads(), getattr(crew._held, "helpers", crew._ALL)))
        np.multiply(x, 2, out=out)

    return graphrt.create(_probe_graph(), {"probe": probe}, **options), seen


def test_threads_one_holds_blas_and_the_helpers_for_the_run_only() -> None:
    before = _blas_threads()
    mod, seen = _probed(threads=1)
    assert mod.compiled.threads == 1
    (y,) = mod(x=np.arange(4, dtype=np.float32))
    np.testing.assert_array_equal(y, [0, 2, 4, 6])
    assert seen == [(1, 0)]  # one BLAS thread, no helper
    assert _blas_threads() == before  # given back when the run ends


def test_the_default_is_every_core_and_holds_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(crew.THREADS_VARIABLE, raising=False)
    before = _blas_threads()
    mod, seen = _probed()
    assert mod.compiled.threads == crew.available_cores()
    mod(x=np.zeros(4, np.float32))
    assert seen == [(before, crew._ALL)]
    more, seen_more = _probed(threads=crew.available_cores() + 3)  # more than the cores
    assert more.compiled.threads == crew.available_cores()
    more(x=np.zeros(4, np.float32))
    assert seen_more == [(before, crew._ALL)]


def test_the_environment_sets_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(crew.THREADS_VARIABLE, "1")
    mod, seen = _probed()
    assert mod.compiled.threads == 1
    mod(x=np.zeros(4, np.float32))
    assert seen[0][1] == 0
    assert crew.default_threads() == 1
    monkeypatch.setenv(crew.THREADS_VARIABLE, "1000")
    assert crew.default_threads() == crew.available_cores()
    for bad in ("zero", "0", "-2", "1.5"):
        monkeypatch.setenv(crew.THREADS_VARIABLE, bad)
        with pytest.raises(graphrt.ArgumentError, match="GRAPHRT_THREADS"):
            _probed()
    monkeypatch.setenv(crew.THREADS_VARIABLE, "2")
    assert _probed(threads=1)[0].compiled.threads == 1  # the argument wins


@pytest.mark.parametrize("bad", [0, -1, True, 2.0, "2", 65])
def test_a_bad_thread_count_is_refused(bad: Any) -> None:
    with pytest.raises(graphrt.ArgumentError, match="threads"):
        _probed(threads=bad)


def test_caps_nest_and_the_lower_one_holds() -> None:
    with crew.threads_held(3):
        assert crew._held.helpers == 2
        with crew.threads_held(1):
            assert crew._held.helpers == 0
            assert _blas_threads() == 1
        with crew.threads_held(5):
            assert crew._held.helpers == 2
    assert getattr(crew._held, "helpers", crew._ALL) == crew._ALL


def test_compiled_kernels_keep_to_the_caller_under_threads_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A convolution model on one thread: no job reaches the helper crew, and the results are
    the bits of the default run."""
    pytest.importorskip("onnx")
    pytest.importorskip("numba")
    sys.path.insert(0, str(Path(__file__).parents[2] / "examples" / "onnx"))
    import models  # type: ignore[import-not-found]

    model = models.resnet18(batch=1, image=32, classes=10)
    feeds = models.sample_inputs(model)
    bundle = graphrt.from_onnx(model)
    shared = [np.asarray(o) for o in bundle.create()(**feeds)]
    handed: list[int] = []
    real = crew._Crew.run

    def spy(self: Any, jobs: Any, args: tuple[Any, ...], helpers: int) -> None:
        handed.append(helpers)
        real(self, jobs, args, helpers)

    monkeypatch.setattr(crew._Crew, "run", spy)
    alone = bundle.create(threads=1)
    got = [np.asarray(o) for o in alone(**feeds)]
    assert handed == []
    for a, b in zip(got, shared, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_the_lanes_share_the_threads_out() -> None:
    """Inter-op lanes hold BLAS to the module's threads divided among them."""
    mod = graphrt.create(branches_graph(), library(), inter_op_threads=2, threads=2)
    assert mod.compiled.parallel is not None and mod.compiled.parallel.blas_threads == 1
    with blas_held(1):
        want = graphrt.create(branches_graph(), library(), inter_op_threads=0)
        x = np.random.default_rng(0).random((24, 24), dtype=np.float32)
        feeds = {"x": x, **{f"w{b}{s}": x for b in range(4) for s in "ab"}}
        np.testing.assert_array_equal(mod(**feeds)[0], want(**feeds)[0])
