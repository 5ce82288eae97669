"""Devices: construction, backends (allocate, view), sim arrays, copies, counters, locate."""

from __future__ import annotations

import importlib.util
import mmap
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import graphrt
from graphrt.devices import ALIGNMENT, SimArray, allocate, backend_for, copier, locate
from graphrt.devices.base import HUGE_PAGE

HAS_CUPY = importlib.util.find_spec("cupy") is not None


# ---------------------------------------------------------------------------------------------
# Device values


def test_factories() -> None:
    assert graphrt.cpu() == graphrt.cpu(0)
    assert graphrt.cpu(0).type_code == 1
    assert graphrt.sim(0).type_code == 12
    assert graphrt.sim(3).id == 3
    assert graphrt.cpu(2).id == 2


@pytest.mark.parametrize(
    ("dev", "text", "kind"),
    [
        (graphrt.cpu(0), "cpu:0", "cpu"),
        (graphrt.cpu(1), "cpu:1", "cpu"),
        (graphrt.sim(0), "sim:0", "sim"),
        (graphrt.sim(7), "sim:7", "sim"),
        (graphrt.Device(2, 1), "cuda:1", "cuda"),
        (graphrt.Device(4, 0), "type4:0", "type4"),
    ],
)
def test_str_repr_kind(dev: graphrt.Device, text: str, kind: str) -> None:
    assert str(dev) == text
    assert repr(dev) == f"graphrt.device({text!r})"
    assert dev.kind == kind


def test_equality_and_hash() -> None:
    assert graphrt.sim(1) == graphrt.sim(1)
    assert graphrt.sim(1) != graphrt.sim(0)
    assert graphrt.sim(0) != graphrt.cpu(0)
    assert graphrt.cpu(0) == graphrt.Device(1, 0)
    assert hash(graphrt.sim(2)) == hash(graphrt.Device(12, 2))
    assert len({graphrt.cpu(0), graphrt.cpu(0), graphrt.sim(0), graphrt.sim(1)}) == 3
    assert {graphrt.sim(0): "x"}[graphrt.device("sim:0")] == "x"
    assert graphrt.cpu(0) != "cpu:0"


def test_device_is_immutable() -> None:
    dev = graphrt.sim(0)
    with pytest.raises(AttributeError):
        dev.id = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        ("cpu", graphrt.cpu(0)),
        ("cpu:0", graphrt.cpu(0)),
        ("cpu:3", graphrt.cpu(3)),
        ("sim", graphrt.sim(0)),
        ("sim:2", graphrt.sim(2)),
        ("SIM:1", graphrt.sim(1)),
        (" cpu:1 ", graphrt.cpu(1)),
    ],
)
def test_device_from_text(spec: str, want: graphrt.Device) -> None:
    assert graphrt.device(spec) == want


def test_device_passes_device_through() -> None:
    dev = graphrt.sim(4)
    assert graphrt.device(dev) is dev


def test_str_round_trips_through_device() -> None:
    for dev in (graphrt.cpu(0), graphrt.sim(5)):
        assert graphrt.device(str(dev)) == dev


@pytest.mark.parametrize("make", [lambda: graphrt.device("cuda:0"), lambda: graphrt.cuda(0)],
                         ids=["by_text", "by_factory"])
def test_cuda_without_cupy(make: Any) -> None:
    try:
        make()
    except graphrt.DeviceError as err:
        if not HAS_CUPY:
            assert "cuda" in str(err)
            assert "graphrt[cuda]" in str(err)
    else:
        assert HAS_CUPY, "graphrt.cuda(0) succeeded without cupy"


def test_cuda_backend_without_cupy() -> None:
    if HAS_CUPY:
        pytest.skip("cupy is installed")
    with pytest.raises(graphrt.DeviceError, match=r"graphrt\[cuda\]"):
        backend_for(graphrt.Device(2, 0))


@pytest.mark.parametrize(
    "spec",
    ["tpu:0", "cpu:x", "cpu:-1", "cpu:1.0", "sim:٣", "", ":0", "cpu:0:1", 3, None, 1.0,
     b"cpu:0", ("cpu", 0)],
)
def test_bad_device_spec(spec: object) -> None:
    with pytest.raises(graphrt.DeviceError):
        graphrt.device(spec)  # type: ignore[arg-type]


@pytest.mark.parametrize("factory", [graphrt.cpu, graphrt.sim, graphrt.cuda])
@pytest.mark.parametrize("ordinal", [-1, -100, True, False, 1.0, "0", None])
def test_bad_ordinal(factory: Any, ordinal: object) -> None:
    with pytest.raises(graphrt.DeviceError):
        factory(ordinal)


def test_unknown_device_type_has_no_backend() -> None:
    with pytest.raises(graphrt.DeviceError):
        backend_for(graphrt.Device(4, 0))


# ---------------------------------------------------------------------------------------------
# Backends: allocate and view

HOST_DEVICES = [graphrt.cpu(0), graphrt.sim(0), graphrt.sim(1)]
SIZES = [1, 2, 7, 63, 64, 65, 100, 1000, 4096, 12345]


@pytest.mark.parametrize("dev", HOST_DEVICES, ids=str)
@pytest.mark.parametrize("nbytes", SIZES)
def test_allocate(dev: graphrt.Device, nbytes: int) -> None:
    buf = backend_for(dev).allocate(nbytes)
    assert buf.dtype == np.uint8
    assert buf.shape == (nbytes,)
    assert buf.ctypes.data % ALIGNMENT == 0
    assert ALIGNMENT == 64
    assert not buf.any()
    assert buf.flags.c_contiguous
    assert buf.flags.writeable


@pytest.mark.parametrize("dev", HOST_DEVICES, ids=str)
def test_allocate_zero_bytes(dev: graphrt.Device) -> None:
    buf = backend_for(dev).allocate(0)
    assert buf.dtype == np.uint8
    assert buf.shape == (0,)
    if dev.kind == "sim":
        assert isinstance(buf, SimArray)
        assert buf.device == dev


@pytest.mark.parametrize("dev", HOST_DEVICES, ids=str)
def test_allocate_zero_bytes_aligned(dev: graphrt.Device) -> None:
    backend = backend_for(dev)
    buffers = [backend.allocate(0) for _ in range(64)]  # kept alive: distinct blocks
    assert [b.ctypes.data % ALIGNMENT for b in buffers] == [0] * len(buffers)


def test_allocate_many_all_aligned() -> None:
    backend = backend_for(graphrt.cpu(0))
    buffers = [backend.allocate(n) for n in range(1, 200)]
    assert all(b.ctypes.data % 64 == 0 for b in buffers)


def _vm_flags(address: int) -> list[str]:
    """The ``VmFlags`` of this process's mapping that holds ``address`` (Linux's smaps)."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if re.fullmatch(r"[0-9a-f]+-[0-9a-f]+", head):
            low, high = (int(part, 16) for part in head.split("-"))
            inside = low <= address < high
        elif inside and head == "VmFlags:":
            return line.split()[1:]
    return []


@pytest.mark.parametrize("dev", HOST_DEVICES, ids=str)
@pytest.mark.parametrize("nbytes", [HUGE_PAGE, 3 * HUGE_PAGE + 12345])
def test_large_buffers_start_on_a_huge_page(dev: graphrt.Device, nbytes: int) -> None:
    buf = backend_for(dev).allocate(nbytes)
    assert buf.shape == (nbytes,) and buf.dtype == np.uint8
    assert buf.ctypes.data % HUGE_PAGE == 0
    assert not buf.any() and buf.flags.c_contiguous and buf.flags.writeable
    buf[-1] = 7  # the whole length is usable
    assert int(buf.sum()) == 7


@pytest.mark.skipif(not Path("/sys/kernel/mm/transparent_hugepage").exists(),
                    reason="needs Linux with transparent huge pages")
def test_large_buffers_are_advised_as_huge_pages() -> None:
    buf = backend_for(graphrt.cpu(0)).allocate(2 * HUGE_PAGE)
    assert "hg" in _vm_flags(buf.ctypes.data)  # madvise(MADV_HUGEPAGE) took
    small = backend_for(graphrt.cpu(0)).allocate(HUGE_PAGE - 1)
    assert "hg" not in _vm_flags(small.ctypes.data)


def test_a_large_buffer_that_cannot_be_mapped_is_a_placement_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def no_memory(*args: Any, **kwargs: Any) -> None:
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(mmap, "mmap", no_memory)
    with pytest.raises(graphrt.PlacementError,
                       match=r"cannot allocate 4194304 bytes on cpu:0 for a test \(MemoryError: "
                             r"cannot map 4194304 bytes"):
        allocate(graphrt.cpu(0), 4 * 2**20, "a test")
    monkeypatch.undo()
    assert allocate(graphrt.cpu(0), 4 * 2**20, "a test").nbytes == 4 * 2**20


def test_backend_is_cached_per_device() -> None:
    assert backend_for(graphrt.sim(0)) is backend_for(graphrt.sim(0))
    assert backend_for(graphrt.sim(0)) is not backend_for(graphrt.sim(1))
    assert backend_for(graphrt.cpu(0)).device == graphrt.cpu(0)


@pytest.mark.parametrize("dev", HOST_DEVICES, ids=str)
@pytest.mark.parametrize(
    ("shape", "dtype"),
    [((), "float32"), ((), "bool"), ((3,), "int64"), ((2, 3), "float16"), ((2, 0), "uint8"),
     ((1, 2, 1, 2, 1, 2), "int8"), ((4,), "bfloat16")],
)
def test_view(dev: graphrt.Device, shape: tuple[int, ...], dtype: str) -> None:
    if dtype == "bfloat16":
        import ml_dtypes

        np_dtype = np.dtype(ml_dtypes.bfloat16)
    else:
        np_dtype = np.dtype(dtype)
    backend = backend_for(dev)
    buf = backend.allocate(128)
    view = backend.view(buf, shape, np_dtype)
    assert view.shape == shape
    assert view.dtype == np_dtype
    assert view.ctypes.data == buf.ctypes.data  # offset 0
    assert np.shares_memory(view, buf) or view.size == 0
    if view.size:
        plain = view.view(np.ndarray)
        plain[...] = 1
        assert buf.view(np.ndarray)[: view.nbytes].any()
        assert not buf.view(np.ndarray)[view.nbytes :].any()
    if dev.kind == "sim":
        assert isinstance(view, SimArray)
        assert view.device == dev
    else:
        assert type(view) is np.ndarray


def test_view_of_exact_size_buffer() -> None:
    backend = backend_for(graphrt.cpu(0))
    buf = backend.allocate(24)
    view = backend.view(buf, (2, 3), np.dtype("float32"))
    view[...] = np.arange(6).reshape(2, 3)
    np.testing.assert_array_equal(buf.view(np.float32), np.arange(6))


# ---------------------------------------------------------------------------------------------
# Sim arrays


def sim_array(values: Any, ordinal: int = 0, dtype: str = "float32") -> SimArray:
    """A sim array holding ``values``, made through the backend (no counted copy)."""
    host = np.asarray(values, dtype=dtype)
    backend = backend_for(graphrt.sim(ordinal))
    arr = backend.view(backend.allocate(host.nbytes), host.shape, host.dtype)
    arr.view(np.ndarray)[...] = host
    return arr


def test_sim_array_device() -> None:
    arr = sim_array([1, 2, 3], ordinal=1)
    assert isinstance(arr, SimArray)
    assert isinstance(arr, np.ndarray)
    assert arr.device == graphrt.sim(1)


def test_sim_views_keep_device() -> None:
    arr = sim_array(np.arange(12).reshape(3, 4), ordinal=2)
    for derived in (arr[1], arr[:, 1:], arr.T, arr.reshape(-1), arr.reshape(2, 6)[0],
                    arr.view(np.int32), arr[..., None]):
        assert isinstance(derived, SimArray)
        assert derived.device == graphrt.sim(2)
        assert np.shares_memory(derived, arr)


def test_sim_ufuncs_same_device() -> None:
    a = sim_array([1, 2, 3])
    b = sim_array([10, 20, 30])
    total = np.add(a, b)
    assert isinstance(total, SimArray)
    assert total.device == graphrt.sim(0)
    np.testing.assert_array_equal(total.view(np.ndarray), [11, 22, 33])
    assert isinstance(a + b, SimArray)
    assert isinstance(np.negative(a), SimArray)
    out = sim_array([0, 0, 0])
    result = np.multiply(a, b, out=out)
    assert result is out
    np.testing.assert_array_equal(out.view(np.ndarray), [10, 40, 90])
    quotient, remainder = np.divmod(b, a)
    assert isinstance(quotient, SimArray)
    assert isinstance(remainder, SimArray)
    assert quotient.device == remainder.device == graphrt.sim(0)


def test_sim_ufuncs_on_other_ordinal_tag_that_ordinal() -> None:
    a = sim_array([1, 2], ordinal=3)
    assert np.add(a, a).device == graphrt.sim(3)


@pytest.mark.parametrize("scalar", [2, 2.5, np.float32(2), np.int64(2), True])
def test_sim_ufuncs_with_scalars(scalar: Any) -> None:
    a = sim_array([1, 2, 3])
    result = np.add(a, scalar)
    assert isinstance(result, SimArray)
    assert result.device == graphrt.sim(0)
    np.testing.assert_allclose(result.view(np.ndarray), np.add([1, 2, 3], scalar))
    assert isinstance(a * scalar, SimArray)


def test_sim_mixed_with_numpy_input_raises() -> None:
    a = sim_array([1, 2, 3])
    host = np.ones(3, dtype="float32")
    with pytest.raises(TypeError, match="sim:0"):
        np.add(a, host)
    with pytest.raises(TypeError):
        np.add(host, a)
    with pytest.raises(TypeError):
        _ = a + host


def test_sim_mixed_with_numpy_out_raises() -> None:
    a = sim_array([1, 2, 3])
    host_out = np.zeros(3, dtype="float32")
    with pytest.raises(TypeError):
        np.add(a, a, out=host_out)
    assert not host_out.any()
    sim_out = sim_array([0, 0, 0])
    host = np.ones(3, dtype="float32")
    with pytest.raises(TypeError):
        np.add(host, host, out=sim_out)
    with pytest.raises(TypeError):
        np.add(host, host, out=(sim_out,))


def test_sim_mixed_ordinals_raises() -> None:
    a = sim_array([1, 2, 3], ordinal=0)
    b = sim_array([1, 2, 3], ordinal=1)
    with pytest.raises(TypeError, match="sim:1"):
        np.add(a, b)
    with pytest.raises(TypeError):
        np.add(b, a)
    with pytest.raises(TypeError):
        np.add(a, a, out=b)


# ---------------------------------------------------------------------------------------------
# Copies and counters

COPY_DEVICES = [graphrt.cpu(0), graphrt.sim(0), graphrt.sim(1)]


def make_array(dev: graphrt.Device, values: np.ndarray) -> Any:
    backend = backend_for(dev)
    arr = backend.view(backend.allocate(values.nbytes), values.shape, values.dtype)
    arr.view(np.ndarray)[...] = values
    return arr


@pytest.fixture
def reset_counters() -> None:
    for ordinal in (0, 1):
        graphrt.sim_counters(graphrt.sim(ordinal)).reset()


def counts(dev: graphrt.Device) -> tuple[int, int, int, int, int, int]:
    c = graphrt.sim_counters(dev)
    return (c.uploads, c.upload_bytes, c.downloads, c.download_bytes, c.device_copies,
            c.device_copy_bytes)


@pytest.mark.usefixtures("reset_counters")
@pytest.mark.parametrize("src", COPY_DEVICES, ids=str)
@pytest.mark.parametrize("dst", COPY_DEVICES, ids=str)
def test_copier(src: graphrt.Device, dst: graphrt.Device) -> None:
    values = np.arange(12, dtype="float32").reshape(3, 4) * 1.5
    source = make_array(src, values)
    target = make_array(dst, np.zeros_like(values))
    for ordinal in (0, 1):
        graphrt.sim_counters(graphrt.sim(ordinal)).reset()
    copier(src, dst)(source, target)
    np.testing.assert_array_equal(target.view(np.ndarray), values)
    np.testing.assert_array_equal(source.view(np.ndarray), values)  # source untouched
    if dst.kind == "sim":
        assert isinstance(target, SimArray)
        assert target.device == dst

    nbytes = values.nbytes
    expected = {graphrt.sim(0): [0] * 6, graphrt.sim(1): [0] * 6}
    if src.kind == "cpu" and dst.kind == "sim":
        expected[dst][0:2] = [1, nbytes]
    elif src.kind == "sim" and dst.kind == "cpu":
        expected[src][2:4] = [1, nbytes]
    elif src.kind == "sim" and dst.kind == "sim":
        # Same kind: the source backend's own copy counts one device copy.
        expected[src][4:6] = [1, nbytes]
    for dev, want in expected.items():
        assert counts(dev) == tuple(want), f"{src} -> {dst}: counters of {dev}"


@pytest.mark.usefixtures("reset_counters")
def test_counters_accumulate_and_reset() -> None:
    dev = graphrt.sim(0)
    host = np.arange(5, dtype="int64")
    target = make_array(dev, np.zeros(5, dtype="int64"))
    back = np.zeros(5, dtype="int64")
    for _ in range(3):
        copier(graphrt.cpu(0), dev)(host, target)
    copier(dev, graphrt.cpu(0))(target, back)
    other = make_array(dev, np.zeros(5, dtype="int64"))
    copier(dev, dev)(target, other)
    copier(dev, dev)(other, target)
    assert counts(dev) == (3, 120, 1, 40, 2, 80)
    np.testing.assert_array_equal(back, host)
    graphrt.sim_counters(dev).reset()
    assert counts(dev) == (0, 0, 0, 0, 0, 0)
    assert counts(graphrt.sim(1)) == (0, 0, 0, 0, 0, 0)


def test_sim_counters_is_per_device_and_persistent() -> None:
    assert graphrt.sim_counters(graphrt.sim(0)) is graphrt.sim_counters(graphrt.sim(0))
    assert graphrt.sim_counters(graphrt.sim(0)) is not graphrt.sim_counters(graphrt.sim(1))


def test_sim_counters_of_cpu_raises() -> None:
    with pytest.raises(graphrt.DeviceError, match="cpu:0"):
        graphrt.sim_counters(graphrt.cpu(0))


def test_copy_dtype_mismatch_is_refused() -> None:
    source = make_array(graphrt.sim(0), np.ones(3, dtype="float64"))
    target = make_array(graphrt.sim(0), np.zeros(3, dtype="float32"))
    differ = re.escape("float64[3] and destination float32[3] differ")
    with pytest.raises(AssertionError, match=differ):
        copier(graphrt.sim(0), graphrt.sim(0))(source, target)


# ---------------------------------------------------------------------------------------------
# locate


def test_locate_numpy_no_copy() -> None:
    arr = np.arange(4, dtype="float32")
    dev, got = locate(arr)
    assert dev == graphrt.cpu(0)
    assert got is arr


def test_locate_non_contiguous_numpy_no_copy() -> None:
    arr = np.arange(12, dtype="float32").reshape(3, 4).T
    dev, got = locate(arr)
    assert dev == graphrt.cpu(0)
    assert got is arr or np.shares_memory(got, arr)


@pytest.mark.parametrize("ordinal", [0, 1])
def test_locate_sim(ordinal: int) -> None:
    arr = sim_array([1, 2, 3], ordinal=ordinal)
    dev, got = locate(arr)
    assert dev == graphrt.sim(ordinal)
    assert got is arr or np.shares_memory(got, arr)
    assert isinstance(got, SimArray)


def test_locate_sim_view() -> None:
    arr = sim_array(np.arange(6).reshape(2, 3), ordinal=1)
    dev, got = locate(arr[1])
    assert dev == graphrt.sim(1)
    assert np.shares_memory(got, arr)


@pytest.mark.parametrize("value", [[1.0, 2.0], [[1, 2], [3, 4]], 3.5, (1, 2, 3)])
def test_locate_converts(value: Any) -> None:
    dev, got = locate(value)
    assert dev == graphrt.cpu(0)
    assert isinstance(got, np.ndarray)
    np.testing.assert_array_equal(got, np.asarray(value))


def test_locate_array_interface_object() -> None:
    class HasArray:
        def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
            return np.array([7, 8], dtype="int32")

    dev, got = locate(HasArray())
    assert dev == graphrt.cpu(0)
    np.testing.assert_array_equal(got, [7, 8])


def test_locate_torch_cpu_tensor_shares_memory() -> None:
    torch = pytest.importorskip("torch")
    tensor = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    dev, got = locate(tensor)
    assert dev == graphrt.cpu(0)
    assert isinstance(got, np.ndarray)
    assert got.shape == (2, 3)
    assert got.dtype == np.float32
    tensor[0, 0] = 42.0
    assert got[0, 0] == 42.0


class FakeDlpack:
    """Something that claims to live on a DLPack device graphrt has no backend for."""

    def __init__(self, device: tuple[int, int]) -> None:
        self._device = device

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._device

    def __dlpack__(self, **kwargs: Any) -> Any:
        raise AssertionError("graphrt should not try to import an unsupported device")


@pytest.mark.parametrize("dlpack_device", [(4, 0), (7, 0), (8, 1), (12, 0), (14, 0)])
def test_locate_unsupported_dlpack_device(dlpack_device: tuple[int, int]) -> None:
    with pytest.raises(graphrt.InputError, match=str(dlpack_device[0])):
        locate(FakeDlpack(dlpack_device))


def test_locate_cuda_dlpack_without_cupy() -> None:
    if HAS_CUPY:
        pytest.skip("cupy is installed")
    with pytest.raises(graphrt.GraphrtError):
        locate(FakeDlpack((2, 0)))


def test_locate_dlpack_cpu() -> None:
    arr = np.arange(5, dtype="int16")

    class Wrapper:
        def __dlpack_device__(self) -> tuple[int, int]:
            return arr.__dlpack_device__()

        def __dlpack__(self, **kwargs: Any) -> Any:
            return arr.__dlpack__(**kwargs)

    dev, got = locate(Wrapper())
    assert dev == graphrt.cpu(0)
    assert np.shares_memory(got, arr)
    np.testing.assert_array_equal(got, arr)


def test_locate_broken_dlpack_is_input_error() -> None:
    class Broken:
        def __dlpack_device__(self) -> tuple[int, int]:
            return (1, 0)

        def __dlpack__(self, **kwargs: Any) -> Any:
            raise BufferError("nope")

    with pytest.raises(graphrt.InputError):
        locate(Broken())


def test_locate_ragged_is_input_error() -> None:
    with pytest.raises(graphrt.InputError):
        locate([[1, 2], [3]])
