"""Shape functions: a kernel's output shapes, computed on the host before the kernel runs.

A node needs one at run time when its output shape depends on data (``dynamic_strided_slice``
with tensor begin/end, ``nonzero``) or binds a shape variable no input binds. Each shape
function declares, per input, whether it reads the input's *values* or only its shape; the
executor copies to the host exactly the inputs whose values it reads and passes only the
types of the others (TVM's VM first copied whole tensors from the GPU).

Example:
    >>> import numpy as np
    >>> def count_positive(types, data):  # output length = number of positive values
    ...     return [(int((data[0] > 0).sum()),)]
    >>> fn = ShapeFunction(count_positive, (True,))
    >>> fn.shapes([TensorType((4,), "float32")], [np.array([1, -1, 2, 0], "float32")])
    [(2,)]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..ops import OpError, TensorType

__all__ = ["ShapeFunction", "ShapeFunctionFn"]

ShapeFunctionFn = Callable[[Sequence[TensorType], Sequence[Any]], Sequence[Sequence[int]]]
"""``fn(input_types, data) -> output shapes``; ``data[i]`` is a host numpy array of input i's
values when input i is declared data-dependent, else None."""


@dataclass(frozen=True)
class ShapeFunction:
    """A shape function and its per-input data dependence.

    Attributes:
        fn: see :data:`ShapeFunctionFn`.
        data_dependent: one flag per input: True when ``fn`` reads the input's values.
    """

    fn: ShapeFunctionFn
    data_dependent: tuple[bool, ...]

    @property
    def needs_data(self) -> bool:
        """Whether any input's values are needed (the node's shapes follow its data)."""
        return any(self.data_dependent)

    def shapes(self, types: Sequence[TensorType], data: Sequence[Any]) -> list[tuple[int, ...]]:
        """The output shapes, checked to be tuples of non-negative ints.

        Raises:
            OpError: the function refused its inputs or returned something that is not a list
                of shapes.
        """
        result = self.fn(types, data)
        try:
            shapes = [tuple(int(dim) for dim in shape) for shape in result]
        except (TypeError, ValueError):
            raise OpError(f"a shape function must return a list of shapes, returned "
                          f"{str(result)[:80]}") from None
        if any(dim < 0 for shape in shapes for dim in shape):
            raise OpError(f"a shape function returned a negative dimension: {shapes}")
        return shapes
