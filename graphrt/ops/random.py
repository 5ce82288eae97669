"""Standard ops: random numbers (ONNX ``RandomUniform``, ``RandomNormal``, their ``*Like``
forms, ``Bernoulli`` and ``Multinomial``).

* ``random_uniform`` / ``random_normal``: a tensor of ``shape`` (no inputs) drawn from
  ``U[low, high)`` or ``N(mean, scale**2)``, in ``dtype`` (float16, float32, float64 or
  bfloat16; float32 by default).
* ``random_uniform_like`` / ``random_normal_like``: the same, shaped as their one input (whose
  values are not read), in ``dtype`` or, when it is None, the input's (float) dtype.
* ``bernoulli``: 1 where a uniform draw falls below the input's probability, else 0, in
  ``dtype`` (any numeric type or bool; None: the input's).
* ``multinomial``: ``sample_size`` class indices per row of a ``[batch, classes]`` input of
  unnormalized log-probabilities, ``[batch, sample_size]`` int32 or int64.

**Seeds.** With a ``seed``, an op is a pure function of the seed and its inputs: every run,
on every graphrt, gives the same values (numpy's PCG64 generator seeded with the seed; a seed
that is not a non-negative integer is first turned into one from its float64 bits). ONNX
leaves what a seed produces to the runtime, so these values match no other runtime. Without a
seed, every run draws fresh values from a generator the operating system seeds. Either way a
random op is never computed at conversion (:attr:`~graphrt.ops.OpDef.random`).

The draws happen on the host (numpy's generator), so these ops run on host devices (cpu, sim):
placement keeps them off cuda.

Example:
    >>> import numpy as np
    >>> from graphrt.ops import get_op
    >>> op = get_op("random_uniform")
    >>> attrs = op.attrs(shape=(2, 3), seed=7.0)
    >>> op.infer([], attrs, [])
    [TensorType(shape=(2, 3), dtype='float32')]
    >>> a, b = np.empty((2, 3), "float32"), np.empty((2, 3), "float32")
    >>> op.compute(np, [], [a], attrs)
    >>> op.compute(np, [], [b], attrs)
    >>> bool((a == b).all()), bool(((0 <= a) & (a < 1)).all())
    (True, True)
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field

from .base import Attrs, OpDef, OpError, TensorType, host_values, register_op

__all__ = ["BernoulliAttrs", "MultinomialAttrs", "NormalAttrs", "UniformAttrs", "generator",
           "seed_integer"]

FloatDtype = Literal["float16", "float32", "float64", "bfloat16"]
NumericDtype = Literal["float16", "float32", "float64", "bfloat16", "int8", "int16", "int32",
                       "int64", "uint8", "uint16", "uint32", "uint64", "bool"]
Seed = Annotated[float, Field(allow_inf_nan=False)]
Size = Annotated[int, Field(ge=0)]


class _Seeded(Attrs):
    """``seed``: None draws fresh values on every run; a number fixes them."""

    seed: Seed | None = None


class _Drawn(_Seeded):
    """The dtype (None: the input's), and (without an input) the shape of the draws."""

    dtype: FloatDtype | None = None
    shape: tuple[Size, ...] | None = None


class UniformAttrs(_Drawn):
    """``random_uniform(_like)``: the bounds ``[low, high)``."""

    low: float = 0.0
    high: float = 1.0


class NormalAttrs(_Drawn):
    """``random_normal(_like)``: the mean and standard deviation."""

    mean: float = 0.0
    scale: float = 1.0


class BernoulliAttrs(_Seeded):
    """``bernoulli``: the output dtype (None: the input's)."""

    dtype: NumericDtype | None = None


class MultinomialAttrs(_Seeded):
    """``multinomial``: samples per row and the index dtype."""

    sample_size: Size = 1
    dtype: Literal["int32", "int64"] = "int32"


def seed_integer(seed: float) -> int:
    """The PCG64 seed of a ``seed`` attribute: the integer itself when it is a non-negative
    integer, else the bits of its float64 (deterministic, never negative).

    Example:
        >>> seed_integer(5.0), seed_integer(-1.0) == 0xBFF0000000000000
        (5, True)
    """
    if seed >= 0 and seed == int(seed):
        return int(seed)
    return int.from_bytes(struct.pack("<d", float(seed)), "little")


def generator(seed: float | None) -> np.random.Generator:
    """A new generator: seeded with :func:`seed_integer` of ``seed``, or by the operating
    system when ``seed`` is None."""
    if seed is None:
        return np.random.default_rng()
    return np.random.Generator(np.random.PCG64(seed_integer(seed)))


def _floats(dtype: str | None, like: str | None, op: str) -> str:
    dtype = dtype or like or "float32"
    if dtype not in ("float16", "float32", "float64", "bfloat16"):
        raise OpError(f"{op}: draws float16, float32, float64 or bfloat16 values; the input is "
                      f"{like}, so give dtype")
    return dtype


def _shape_infer(name: str) -> Any:
    """The shape function of ``random_uniform``/``random_normal`` (``shape``, no input) or
    of their ``_like`` forms (the input's shape)."""
    like = name.endswith("_like")

    def infer(types: Sequence[TensorType], attrs: UniformAttrs | NormalAttrs,
              data: Sequence[Any]) -> list[TensorType]:
        if len(types) != int(like):
            raise OpError(f"{name}: expected {int(like)} input(s), given {len(types)}")
        if like:
            return [TensorType(types[0].shape, _floats(attrs.dtype, types[0].dtype, name))]
        if attrs.shape is None:
            raise OpError(f"{name}: needs a shape")
        return [TensorType(tuple(attrs.shape), _floats(attrs.dtype, None, name))]

    return infer


def _uniform(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
             attrs: UniformAttrs) -> None:
    out = outputs[0]
    draws = generator(attrs.seed).random(out.shape)
    with np.errstate(all="ignore"):  # bounds whose span overflows float64
        out[...] = attrs.low + (attrs.high - attrs.low) * draws


def _normal(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any], attrs: NormalAttrs) -> None:
    out = outputs[0]
    draws = generator(attrs.seed).standard_normal(out.shape)
    with np.errstate(all="ignore"):  # a negative scale mirrors the draws, as ONNX's formula
        out[...] = attrs.mean + attrs.scale * draws


def _bernoulli_infer(types: Sequence[TensorType], attrs: BernoulliAttrs, data: Sequence[Any]
                     ) -> list[TensorType]:
    if len(types) != 1:
        raise OpError(f"bernoulli: expected 1 input, given {len(types)}")
    (p,) = types
    if p.dtype not in ("float16", "float32", "float64", "bfloat16"):
        raise OpError(f"bernoulli: the probabilities must be floats, given {p.dtype}")
    return [TensorType(p.shape, attrs.dtype or p.dtype)]


def _bernoulli(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
               attrs: BernoulliAttrs) -> None:
    p = host_values(xp, inputs[0]).astype(np.float64)
    outputs[0][...] = generator(attrs.seed).random(p.shape) < p


def _multinomial_infer(types: Sequence[TensorType], attrs: MultinomialAttrs,
                       data: Sequence[Any]) -> list[TensorType]:
    if len(types) != 1:
        raise OpError(f"multinomial: expected 1 input, given {len(types)}")
    (x,) = types
    if x.ndim != 2 or x.dtype not in ("float16", "float32", "float64", "bfloat16"):
        raise OpError(f"multinomial: the input must be float log-probabilities [batch, "
                      f"classes], given {x.dtype}{list(x.shape)}")
    if x.shape[1] == 0 and x.shape[0] and attrs.sample_size:
        raise OpError("multinomial: cannot sample from 0 classes")
    return [TensorType((x.shape[0], attrs.sample_size), attrs.dtype)]


def _multinomial(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                 attrs: MultinomialAttrs) -> None:
    logits, out = host_values(xp, inputs[0]).astype(np.float64), outputs[0]
    if out.size == 0:
        return
    with np.errstate(all="ignore"):
        weights = np.nan_to_num(np.exp(logits - logits.max(axis=1, keepdims=True)))
    weights[weights.sum(axis=1) == 0] = 1.0  # a row with no weight (all -inf): uniform
    cdf = np.cumsum(weights, axis=1)
    draws = generator(attrs.seed).random(out.shape) * cdf[:, -1:]
    picks = np.stack([np.searchsorted(row, u, side="right") for row, u in zip(cdf, draws,
                                                                              strict=True)])
    out[...] = np.minimum(picks, logits.shape[1] - 1)


for _name, _attrs, _compute in (("random_uniform", UniformAttrs, _uniform),
                                ("random_normal", NormalAttrs, _normal)):
    register_op(OpDef(name=_name, attrs=_attrs, arity=0, infer=_shape_infer(_name),
                      compute=_compute, random=True))
    register_op(OpDef(name=f"{_name}_like", attrs=_attrs, arity=1,
                      infer=_shape_infer(f"{_name}_like"), compute=_compute, random=True))
register_op(OpDef(name="bernoulli", attrs=BernoulliAttrs, arity=1, infer=_bernoulli_infer,
                  compute=_bernoulli, random=True))
register_op(OpDef(name="multinomial", attrs=MultinomialAttrs, arity=1,
                  infer=_multinomial_infer, compute=_multinomial, random=True))
