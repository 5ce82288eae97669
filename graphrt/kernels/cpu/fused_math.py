"""numba intrinsics for the generated elementwise loops (:mod:`graphrt.kernels.cpu.loops`).

``muladd(a, b, c) = a * b + c`` in float32, fused into one instruction where the CPU has FMA
(LLVM's ``llvm.fmuladd``: a separate multiply and add where it has not).

Only the loops' own helpers use it (erf's polynomial): a step of a user's model is never
contracted, so ``a * b + c`` written as two ONNX nodes stays two roundings, as numpy's.

Example:
    >>> import numba
    >>> @numba.njit
    ... def f(a, b, c):
    ...     return muladd(a, b, c)
    >>> f(2.0, 3.0, 1.0)
    7.0

``pointer(address, dtype)`` is an integer address as a typed pointer: a small loop bound to
its arrays once reads them through their addresses, one array of integers per call instead
of an array argument each (:class:`graphrt.kernels.cpu.loops.BoundLoop`).

    >>> import numpy as np
    >>> @numba.njit
    ... def first(address):
    ...     return pointer(address, np.float32)[0]
    >>> data = np.array([2.5, 1.0], np.float32)
    >>> float(first(data.ctypes.data))
    2.5
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["muladd", "pointer"]

_F32 = ir.FloatType()


@intrinsic
def muladd(typingctx: Any, a: Any, b: Any, c: Any) -> Any:
    """``a * b + c`` in float32, fused where the CPU can (see the module docstring)."""
    sig = types.float32(types.float32, types.float32, types.float32)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        function = cgutils.get_or_insert_function(  # type: ignore[no-untyped-call]
            builder.module, ir.FunctionType(_F32, [_F32] * 3), "llvm.fmuladd.f32")
        values = [context.cast(builder, value, arg, types.float32)
                  for value, arg in zip(args, signature.args, strict=True)]
        return builder.call(function, values)

    return sig, codegen


@intrinsic
def pointer(typingctx: Any, address: Any, dtype: Any) -> Any:
    """``address`` (an integer) as a pointer to values of ``dtype`` (a numpy scalar type)."""
    target = dtype.dtype if isinstance(dtype, types.DType) else dtype.instance_type
    sig = types.CPointer(target)(address, dtype)  # type: ignore[no-untyped-call]

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.inttoptr(args[0], context.get_value_type(signature.return_type))

    return sig, codegen
