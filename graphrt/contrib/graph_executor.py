"""``tvm.contrib.graph_executor`` for graphrt: TVM's graph-executor API, same names and calls.

Code written for TVM's graph executor runs by changing its import::

    from graphrt.contrib import graph_executor     # was: from tvm.contrib import graph_executor

    m = graph_executor.create(graph_json, lib, graph_executor.cpu(0))
    m.set_input("x", x)                            # or m.set_input(x=x), m["set_input"]("x", x)
    m.load_params(params_bytes)                    # TVM's save_param_dict blob
    m.run()                                        # or m["run"]()
    y = m.get_output(0).numpy()

What you pass as ``lib`` differs. TVM's ``libmod`` is a compiled shared library (``.so``,
``.tar``, ``lib["default"]``): native code built for TVM's C runtime ABI (``TVMArgs`` packed
calls on ``DLTensor`` handles, linked against ``libtvm_runtime``), which only TVM's runtime can
load and call. graphrt runs kernels written in Python: a :class:`graphrt.Library` of
numpy/cupy kernels (``lib.register(func_name, fn)``) or declarative functions of standard ops
(``lib.define`` / ``Library.from_json``), or a plain mapping of ``func_name`` to kernel. The
graph JSON and the params blob are TVM's own and are read unchanged.

Devices are graphrt's: ``graph_executor.cpu(0)``, ``cuda(0)``, ``sim(0)`` (re-exported from
:mod:`graphrt`) or text such as ``"cuda:0"``. Arrays come back as :class:`NDArray`, with the
methods TVM code uses (``numpy()``, ``asnumpy()``, ``shape``, ``dtype``, ``copyto``,
``copyfrom``); ``NDArray.array`` is the device's native array (numpy, cupy, or sim).

Differences from TVM, on purpose (graphrt's, see the README): an unknown input or param name,
a wrong shape and a wrong dtype raise :class:`graphrt.InputError` instead of being ignored,
reinterpreted or cast; every thread gets its own run context; params are held once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from os import PathLike, fspath
from typing import Any

import numpy as np
import numpy.typing as npt

from ..devices import (
    Device,
    DeviceArgumentError,
    allocate,
    backend_for,
    copier,
    cpu,
    cuda,
    device,
    locate,
    sim,
)
from ..errors import ArgumentError, DeviceError, InputError, describe
from ..executor import GraphModule as _Module
from ..executor import create as _create
from ..lib import Library, LibrarySource
from ..schema import GraphSource, dtype_of, parse_dtype

__all__ = [
    "GraphModule",
    "NDArray",
    "array",
    "cpu",
    "create",
    "cuda",
    "empty",
    "sim",
]

DeviceLike = Device | str
"""A graphrt :class:`Device` or its text (``"cpu"``, ``"cuda:0"``, ``"sim:1"``)."""

_TVM_LIBRARY_SUFFIXES = (".so", ".tar", ".dll", ".dylib", ".o", ".a")


# -- arrays ------------------------------------------------------------------------------------


class NDArray:
    """An array on a graphrt device, with the methods of TVM's ``tvm.nd.NDArray``.

    ``get_output``, ``get_input`` and ``debug_get_output`` return these. It wraps the device's
    native array (``numpy.ndarray`` on cpu, ``cupy.ndarray`` on cuda, a sim array on sim)
    without copying it; :attr:`array` gives that array.

    Args:
        array: a numpy, cupy or sim array (wrapped, not copied), or another ``NDArray``.

    Raises:
        InputError: ``array`` is not an array graphrt can place on a device.

    Example:
        >>> import numpy as np
        >>> from graphrt.contrib import graph_executor
        >>> a = graph_executor.array(np.arange(4, dtype="float32"), graph_executor.sim(0))
        >>> a.shape, a.dtype, a.device
        ((4,), 'float32', graphrt.device('sim:0'))
        >>> a.numpy()
        array([0., 1., 2., 3.], dtype=float32)
        >>> float(a.copyto(graph_executor.cpu(0)).numpy().sum())
        6.0
    """

    __slots__ = ("_array", "_device")

    def __init__(self, array: Any) -> None:
        if isinstance(array, NDArray):
            self._device: Device = array._device
            self._array: Any = array._array
        else:
            self._device, self._array = locate(array)

    @property
    def array(self) -> Any:
        """The device's native array (shares memory with this ``NDArray``)."""
        return self._array

    @property
    def device(self) -> Device:
        """The graphrt device holding the array."""
        return self._device

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(d) for d in self._array.shape)

    @property
    def dtype(self) -> str:
        """The dtype as TVM spells it: ``"float32"``, ``"int8"``, ``"bfloat16"``, ``"bool"``."""
        known = dtype_of(np.dtype(self._array.dtype))
        return known.name if known is not None else str(self._array.dtype)

    @property
    def ndim(self) -> int:
        return len(self._array.shape)

    def numpy(self) -> np.ndarray[Any, Any]:
        """A host (numpy) copy of the array.

        Example:
            >>> y = m.get_output(0).numpy()  # doctest: +SKIP
        """
        host = np.empty(self.shape, dtype=self._array.dtype)
        copier(self._device, cpu(0))(self._array, host)
        return host

    def asnumpy(self) -> np.ndarray[Any, Any]:
        """Old TVM name of :meth:`numpy`."""
        return self.numpy()

    def copyto(self, target: NDArray | DeviceLike) -> NDArray:
        """Copy to a device (a new array there) or into another ``NDArray`` (returned).

        Raises:
            InputError: ``target`` is an array of another shape or dtype, or neither an
                ``NDArray`` nor a device.
            DeviceError: ``target`` is text that names no usable device.

        Example:
            >>> on_host = m.get_output(0).copyto(graph_executor.cpu(0))  # doctest: +SKIP
        """
        if isinstance(target, NDArray):
            _check_same(self.shape, self._array.dtype, target, "copyto target")
            copier(self._device, target._device)(self._array, target._array)
            return target
        if not isinstance(target, Device | str):
            raise ArgumentError(f"copyto target must be an NDArray or a device (graphrt.cpu(0), "
                                f"'cuda:0', ...), given {type(target).__name__}")
        result = empty(self.shape, np.dtype(self._array.dtype), target)
        copier(self._device, result._device)(self._array, result._array)
        return result

    def copyfrom(self, source: Any) -> NDArray:
        """Copy ``source`` (an ``NDArray``, or a numpy, cupy, sim or DLPack array on any device)
        into this array, and return this array.

        Unlike TVM, the dtype is never cast: it must match exactly, like the shape.

        Raises:
            InputError: a shape or dtype that differs, or a value that is not an array.
        """
        if isinstance(source, NDArray):
            src_dev, src = source._device, source._array
        else:
            src_dev, src = locate(source)
        _check_same(tuple(src.shape), src.dtype, self, "copyfrom source")
        if not src.flags.c_contiguous:
            if src_dev.type_code != cpu(0).type_code:
                raise InputError(f"copyfrom source on {src_dev} must be C-contiguous")
            src = np.ascontiguousarray(src)
        copier(src_dev, self._device)(src, self._array)
        return self

    def __setitem__(self, key: object, value: Any) -> None:
        """``arr[:] = value`` copies ``value`` in (TVM supports only the full slice)."""
        if not (isinstance(key, slice) and key == slice(None)):
            raise ArgumentError(f"an NDArray supports only arr[:] = value, given index "
                                f"{describe(key)}")
        self.copyfrom(value)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray[Any, Any]:
        if self._device.type_code == cpu(0).type_code and not copy:
            host = np.asarray(self._array)
        elif copy is False:
            raise ValueError(f"an array on {self._device} cannot be read by numpy without a "
                             "copy")
        else:
            host = self.numpy()
        return host if dtype is None else host.astype(dtype, copy=False)

    def __repr__(self) -> str:
        return f"<graphrt NDArray shape={self.shape}, {self._device}>\n{self.numpy()!r}"


def empty(shape: Sequence[int] | int, dtype: npt.DTypeLike = "float32",
          device: DeviceLike | None = None) -> NDArray:
    """A zero-filled array (TVM's ``tvm.nd.empty``), e.g. for ``get_output(i, out)``.

    Args:
        shape: non-negative ints (or one int).
        dtype: a graph dtype (``"float32"``, ``"int8"``, ``"bfloat16"``, ...) or numpy dtype.
        device: where to allocate it; ``cpu(0)`` by default.

    Raises:
        InputError: a shape or dtype graphrt cannot hold.
        DeviceError: an unknown or unusable device.

    Example:
        >>> from graphrt.contrib import graph_executor
        >>> graph_executor.empty((2, 3), "int8").numpy().tolist()
        [[0, 0, 0], [0, 0, 0]]
    """
    dev = cpu(0) if device is None else _device(device)
    dims = _shape(shape)
    np_dtype = _dtype(dtype)
    nbytes = math.prod(dims) * np_dtype.itemsize
    buffer = allocate(dev, nbytes, f"an NDArray of shape {dims} {np_dtype}")
    return NDArray(backend_for(dev).view(buffer, dims, np_dtype))


def array(source: Any, device: DeviceLike | None = None) -> NDArray:
    """A copy of ``source`` on ``device`` (TVM's ``tvm.nd.array``); ``cpu(0)`` by default.

    ``source`` may be an ``NDArray``, or a numpy, cupy, sim or DLPack array, or anything
    ``numpy.asarray`` accepts; its dtype is kept.

    Example:
        >>> import numpy as np
        >>> from graphrt.contrib import graph_executor
        >>> graph_executor.array(np.ones(4, "float32"), "sim:0").device
        graphrt.device('sim:0')
    """
    src = source if isinstance(source, NDArray) else NDArray(source)
    return src.copyto(cpu(0) if device is None else device)


def _check_same(shape: tuple[int, ...], dtype: np.dtype[Any], other: NDArray, what: str) -> None:
    if tuple(shape) != other.shape or np.dtype(dtype) != np.dtype(other._array.dtype):
        given = dtype_of(np.dtype(dtype))
        raise InputError(f"{what}: expected shape {other.shape} {other.dtype}, given "
                         f"{tuple(shape)} {given.name if given is not None else dtype}")


def _shape(shape: object) -> tuple[int, ...]:
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, Sequence) or not all(
            isinstance(d, int | np.integer) and not isinstance(d, bool) and d >= 0
            for d in shape):
        raise ArgumentError(f"a shape is a sequence of non-negative ints, given "
                            f"{describe(shape)}")
    return tuple(int(d) for d in shape)


def _dtype(dtype: object) -> np.dtype[Any]:
    if isinstance(dtype, str):
        try:
            return parse_dtype(dtype).numpy
        except ValueError as err:
            raise InputError(str(err)) from None
    try:
        np_dtype: np.dtype[Any] = np.dtype(dtype)  # type: ignore[call-overload]
    except TypeError as err:
        raise ArgumentError(f"not a dtype: {describe(dtype)} ({err})") from None
    if dtype_of(np_dtype) is None:
        raise InputError(f"unsupported dtype {np_dtype} (graphs hold bool, (b)float, int and "
                         "uint types)")
    return np_dtype


def _native(value: Any) -> Any:
    """The device array under an :class:`NDArray`; any other value as it is."""
    return value.array if isinstance(value, NDArray) else value


def _device(spec: object) -> Device:
    if not isinstance(spec, Device | str):
        raise DeviceArgumentError(f"a device is a graphrt Device (graph_executor.cpu(0), "
                                  f"cuda(0), sim(0)) or text like 'cuda:0', given "
                                  f"{type(spec).__name__}")
    return device(spec)


# -- the module --------------------------------------------------------------------------------


def create(graph_json_str: GraphSource, libmod: LibrarySource,
           device: DeviceLike | Sequence[DeviceLike], *, strict_placement: bool = False,
           device_map: Mapping[str | int, DeviceLike] | None = None,
           require_inputs: bool = False) -> GraphModule:
    """Create a graph module from graph JSON and a lib (TVM's ``graph_executor.create``).

    Args:
        graph_json_str: the graph JSON TVM's compiler wrote, as text (as in TVM), or bytes, a
            path or a dict.
        libmod: the kernels the graph's ``func_name``s name: a :class:`graphrt.Library` or a
            mapping of ``func_name`` to kernel. Not TVM's compiled ``.so``: that is native code
            for TVM's runtime ABI, which graphrt cannot call (see the module docstring).
        device: one device, or a list of devices for heterogeneous execution; the first is the
            fallback for entries placed on a device type not given. graphrt devices
            (``graph_executor.cpu(0)``, ``cuda(0)``, ``sim(0)``) or text (``"cuda:0"``).
        strict_placement, device_map, require_inputs: graphrt's options, as in
            :func:`graphrt.create` (e.g. ``device_map={"cuda": "sim:0"}`` runs a CUDA graph
            on the simulated accelerator).

    Raises:
        InputError: ``libmod`` is not a graphrt lib (e.g. a path to TVM's ``.so``).
        DeviceError: no device, or one that is unknown or unusable.
        GraphFormatError, PlacementError, KernelNotFoundError: as :func:`graphrt.create`.

    Example:
        >>> import numpy as np
        >>> from graphrt.contrib import graph_executor
        >>> lib = {"elemwise_add": lambda a, b, out: np.add(a, b, out=out),
        ...        "elemwise_sub": lambda a, b, out: np.subtract(a, b, out=out)}
        >>> m = graph_executor.create(open("examples/graphs/duplex.json").read(),
        ...                           lib, graph_executor.cpu(0))  # doctest: +SKIP
    """
    devices = _device_list(device)
    library = _library(libmod)
    return GraphModule(_create(graph_json_str, library, *devices,
                               strict_placement=strict_placement, device_map=device_map,
                               require_inputs=require_inputs))


def _device_list(spec: object) -> tuple[Device, ...]:
    if isinstance(spec, Device | str):
        return (_device(spec),)
    if not isinstance(spec, list | tuple):
        raise DeviceArgumentError(f"device has to be a device or a list of devices (graphrt "
                                  f"Devices or text like 'cuda:0'), given "
                                  f"{type(spec).__name__}")
    if not spec:
        raise DeviceError("device is an empty list; give at least one device (the first is "
                          "the fallback)")
    return tuple(_device(item) for item in spec)


def _library(libmod: object) -> LibrarySource:
    if isinstance(libmod, Library | Mapping):
        return libmod
    if isinstance(libmod, str | PathLike):
        path = fspath(libmod)
        hint = ("it is native code for TVM's runtime ABI, which only TVM's runtime can load; "
                if str(path).endswith(_TVM_LIBRARY_SUFFIXES) else "")
        raise InputError(f"graphrt cannot use the library file {str(path)[:200]!r} as the lib: "
                         f"{hint}give a graphrt.Library (Python kernels with lib.register, "
                         "declarative functions with lib.define or "
                         "graphrt.Library.from_json(path)) or a dict of func_name to kernel")
    raise ArgumentError(f"libmod must be a graphrt.Library or a mapping of func_name to kernel "
                        f"(TVM's compiled modules cannot be loaded), given "
                        f"{type(libmod).__name__}")


class GraphModule:
    """TVM's ``graph_executor.GraphModule`` over a :class:`graphrt.GraphModule`.

    Make one with :func:`create`, or wrap a module ``graphrt.create`` made:
    ``GraphModule(graphrt.create(graph, lib, dev))``. :attr:`module` is that graphrt module,
    with graphrt's whole API (``placement()``, ``profile()``, zero copy, ``memory()``, ...).
    ``m["name"]`` returns the function called ``name``, as TVM's module functions.

    Inputs may be :class:`NDArray` s or any array graphrt accepts (numpy, cupy, sim, DLPack).
    As in graphrt, each thread has its own inputs and outputs, params are held once.

    Example:
        >>> m = graph_executor.create(graph_json, lib, graph_executor.cpu(0))  # doctest: +SKIP
        >>> m.set_input("A", a)  # doctest: +SKIP
        >>> m["run"]()  # doctest: +SKIP
        >>> m.get_output(0).numpy()  # doctest: +SKIP
    """

    _FUNCTIONS: Mapping[str, str] = {
        "set_input": "set_input",
        "set_input_zero_copy": "_set_input_zero_copy",
        "set_output_zero_copy": "_set_output_zero_copy",
        "run": "run",
        "run_from_inputs": "_run_from_inputs",
        "get_output": "get_output",
        "get_input": "get_input",
        "get_num_outputs": "get_num_outputs",
        "get_num_inputs": "get_num_inputs",
        "get_input_index": "get_input_index",
        "get_output_index": "get_output_index",
        "get_input_info": "_input_info_map",
        "get_output_info": "_output_info_map",
        "load_params": "load_params",
        "share_params": "share_params",
        "debug_get_output": "debug_get_output",
    }

    module: _Module
    """The graphrt module this one wraps."""

    def __init__(self, module: _Module | GraphModule) -> None:
        if isinstance(module, GraphModule):
            module = module.module
        if not isinstance(module, _Module):
            raise ArgumentError(f"GraphModule wraps a graphrt.GraphModule (from graphrt.create); "
                                f"given {type(module).__name__}. TVM's compiled factory modules "
                                "(lib['default'](dev)) cannot run in graphrt: use "
                                "graph_executor.create(graph_json, lib, dev)")
        self.module = module

    def __repr__(self) -> str:
        return f"<graph_executor.GraphModule over {self.module!r}>"

    def __getitem__(self, key: str) -> Callable[..., Any]:
        """The module function called ``key``: ``m["run"]()``, ``m["set_input"]("x", a)``,
        ``m["get_output"](0)``, ``m["load_params"](blob)``, ``m["get_num_outputs"]()``.

        ``m["get_input_info"]()`` returns TVM's map, ``{"shape": {...}, "dtype": {...}}``
        (the method :meth:`get_input_info` returns the pair).

        Raises:
            InputError: no function of that name; the message lists them.
        """
        attribute = self._FUNCTIONS.get(key) if isinstance(key, str) else None
        if attribute is None:
            raise InputError(f"graph_executor.GraphModule has no function {describe(key)}; its "
                             f"functions are: {', '.join(sorted(self._FUNCTIONS))}")
        function: Callable[..., Any] = getattr(self, attribute)
        return function

    # -- inputs and running ----------------------------------------------------------------

    def set_input(self, key: int | str | None = None, value: Any = None, **params: Any) -> None:
        """Set inputs: ``set_input("A", a)``, ``set_input(key="A", value=a)``,
        ``set_input(A=a, B=b)``, or a key and more names at once.

        Values are copied into the calling thread's context from any device. All are checked
        before any is set.

        Raises:
            InputError: an unknown name or index, a shape or dtype that does not match (TVM
                ignored unknown names and reinterpreted or cast the rest), or a value without
                a key.

        Example:
            >>> m.set_input("A", np.ones(4, "float32"))  # doctest: +SKIP
        """
        values = {name: _native(v) for name, v in params.items()}
        if key is None:
            if value is not None:
                raise ArgumentError("set_input was given a value but no key (the input's name "
                                    "or position)")
            self.module.set_input(**values)
        elif isinstance(key, str) and key in values:
            self.module.set_input(**values)  # TVM set the key first, then params over it
        else:
            self.module.set_input(key, _native(value), **values)

    def run(self, **input_dict: Any) -> None:
        """Set the inputs given (as :meth:`set_input`), then run the graph.

        Raises:
            InputError: as :meth:`set_input`.
            ExecutionError: a kernel raised; names its node, func_name and device.

        Example:
            >>> m.run(A=a, B=b, C=c, D=d)  # doctest: +SKIP
        """
        self.module.run(**{name: _native(v) for name, v in input_dict.items()})

    def get_input(self, index: int | str, out: NDArray | Any = None) -> Any:
        """Input ``index`` (a position or a name) as an :class:`NDArray` sharing the module's
        memory, or copied into ``out`` (an ``NDArray`` or a native array), which is returned.

        Raises:
            InputError: no such input (TVM returned None), or ``out`` does not fit.
        """
        if out is None:
            return NDArray(self.module.get_input(index))
        self.module.get_input(index, out=_native(out))
        return out

    def get_output(self, index: int | str, out: NDArray | Any = None) -> Any:
        """Output ``index`` as an :class:`NDArray` over the module's memory (the same thread's
        next run overwrites it, as in TVM), or copied into ``out``, which is returned.

        Raises:
            InputError: no such output, or ``out`` has another shape or dtype.
            ExecutionError: the last run failed before computing this output.

        Example:
            >>> y = m.get_output(0).numpy()  # doctest: +SKIP
            >>> m.get_output(0, graph_executor.empty((4,), "float32"))  # doctest: +SKIP
        """
        if out is None:
            return NDArray(self.module.get_output(index))
        self.module.get_output(index, out=_native(out))
        return out

    def debug_get_output(self, node: int | str, out: NDArray | Any = None) -> Any:
        """Run the graph up to ``node`` (its id, or its name when unique) and return a copy of
        its first output, or copy it into ``out``. TVM needed its debug executor for this.

        Raises:
            InputError: no such node, or several nodes of that name.

        Example:
            >>> m.debug_get_output("elemwise_sub").numpy()  # doctest: +SKIP
        """
        if out is None:
            return NDArray(self.module.debug_get_output(node))
        self.module.debug_get_output(node, out=_native(out))
        return out

    def _set_input_zero_copy(self, key: int | str, value: Any) -> None:
        self.module.set_input_zero_copy(key, _native(value))

    def _set_output_zero_copy(self, key: int | str, value: Any) -> None:
        self.module.set_output_zero_copy(key, _native(value))

    def _run_from_inputs(self, device_type: int, device_id: int, *args: Any) -> list[NDArray]:
        """TVM's ``run_from_inputs``: set ``key, value`` pairs, run, and return copies of every
        output on the device ``(device_type, device_id)``."""
        if len(args) % 2:
            raise InputError("run_from_inputs takes a device type, a device id, then key, value "
                             f"pairs; given {len(args)} values after the device")
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in (device_type,
                                                                             device_id)):
            raise ArgumentError(f"run_from_inputs takes an int device type and id, given "
                                f"{describe(device_type)}, {describe(device_id)}")
        factory = {"cpu": cpu, "cuda": cuda, "sim": sim}.get(Device(device_type).kind)
        target = Device(device_type, device_id) if factory is None else factory(device_id)
        backend_for(target)  # an unknown device type is a DeviceError here
        for key, value in zip(args[::2], args[1::2], strict=True):
            self.module.set_input(key, _native(value))
        self.module.run()
        return [NDArray(self.module.get_output(i)).copyto(target)
                for i in range(self.get_num_outputs())]

    # -- params ----------------------------------------------------------------------------

    def load_params(self, params_bytes: bytes | bytearray | memoryview | Mapping[str, Any]
                    ) -> None:
        """Load params from TVM's params blob (``save_param_dict`` / ``graphrt.save_params``
        bytes), or a mapping of name to array; held once for every thread.

        Raises:
            GraphFormatError: the blob is corrupt.
            InputError: a name that is not an input of the graph, a shape or dtype that does
                not match, or neither bytes nor a mapping.

        Example:
            >>> m.load_params(graphrt.save_params({"C": c}))  # doctest: +SKIP
        """
        if isinstance(params_bytes, Mapping):
            params_bytes = {name: _native(v) for name, v in params_bytes.items()}
        self.module.load_params(params_bytes)

    def share_params(self, other: GraphModule | _Module,
                     params_bytes: bytes | bytearray | memoryview) -> None:
        """Read the params named in ``params_bytes`` from ``other``'s memory, without copying
        them (TVM's ``share_params``). Only the blob's names are used.

        Raises:
            InputError: ``other`` is not a graph module, or a name it has not loaded.

        Example:
            >>> m2.share_params(m1, params_bytes)  # doctest: +SKIP
        """
        source = other.module if isinstance(other, GraphModule) else other
        self.module.share_params(source, params_bytes)

    # -- information -----------------------------------------------------------------------

    def get_num_inputs(self) -> int:
        """Number of inputs, params included."""
        return self.module.get_num_inputs()

    def get_num_outputs(self) -> int:
        """Number of outputs."""
        return self.module.get_num_outputs()

    def get_input_index(self, name: str) -> int:
        """Position of the input called ``name``, or -1 when there is none (as TVM)."""
        if not isinstance(name, str):
            raise ArgumentError(f"get_input_index takes an input name (str), given "
                                f"{describe(name)}")
        return self.module.get_input_index(name)

    def get_output_index(self, name: str) -> int:
        """Position of the output called ``name``, or -1 when there is none (as TVM).

        Raises:
            InputError: several outputs share the name; the message lists them.
        """
        if not isinstance(name, str):
            raise ArgumentError(f"get_output_index takes an output name (str), given "
                                f"{describe(name)}")
        return self.module.get_output_index(name)

    def get_input_info(self) -> tuple[dict[str, Any], dict[str, str]]:
        """``(shape_dict, dtype_dict)`` of every input, params included, as TVM returns them
        (plain dicts here, where TVM returned Map objects).

        Example:
            >>> shapes, dtypes = m.get_input_info()  # doctest: +SKIP
            >>> shapes["A"], dtypes["A"]  # doctest: +SKIP
            ((4,), 'float32')
        """
        info = self.module.get_input_info()
        return dict(info["shape"]), dict(info["dtype"])

    def get_output_info(self) -> tuple[dict[str, Any], dict[str, str]]:
        """``(shape_dict, dtype_dict)`` of every output (one per output entry)."""
        info = self.module.get_output_info()
        return dict(info["shape"]), dict(info["dtype"])

    def _input_info_map(self) -> dict[str, dict[str, Any]]:
        return self.module.get_input_info()

    def _output_info_map(self) -> dict[str, dict[str, Any]]:
        return self.module.get_output_info()

    # -- timing ----------------------------------------------------------------------------

    def benchmark(self, device: DeviceLike, func_name: str = "run", repeat: int = 5,
                  number: int = 5, min_repeat_ms: float | None = None, end_to_end: bool = False,
                  **kwargs: Any) -> Any:
        """Time ``run()`` (TVM's ``benchmark``): ``repeat`` samples, each the mean of ``number``
        runs, in seconds. Returns graphrt's ``BenchmarkResult``, with TVM's fields: ``.mean``,
        ``.median``, ``.std``, ``.min``, ``.max``, ``.results``; printing it gives a summary.

        Every device of the module is synchronized around each sample, so GPU work is timed,
        not its launch. With ``end_to_end``, copying ``kwargs`` in and every output to the host
        is timed too; otherwise ``kwargs`` are set once before timing.

        Args:
            device: a device of this module (TVM's timer device).
            func_name: only ``"run"`` (graphrt times whole runs).

        Raises:
            InputError: another ``func_name``, a device the module does not run on, counts
                below 1, or bad inputs.

        Example:
            >>> print(m.benchmark(graph_executor.cpu(0), repeat=10, number=100))  # doctest: +SKIP
        """
        if func_name != "run":
            raise InputError(f"benchmark times 'run' only, given func_name "
                             f"{describe(func_name)}")
        dev = _device(device)
        if dev not in self.module.devices:
            raise InputError(f"benchmark device {dev} is not one this module runs on (it runs "
                             f"on {', '.join(map(str, self.module.devices))})")
        inputs = {name: _native(v) for name, v in kwargs.items()}
        return self.module.benchmark(repeat=repeat, number=number, min_repeat_ms=min_repeat_ms,
                                     end_to_end=end_to_end, **inputs)
