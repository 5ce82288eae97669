"""A numba intrinsic for the generated elementwise loops (:mod:`graphrt.kernels.cpu.loops`):
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
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["muladd"]

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
