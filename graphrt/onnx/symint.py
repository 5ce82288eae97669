"""Sizes that remember how they were computed from the model's symbolic input dimensions.

While converting, every size is concrete: the model is converted at its bounds (and at a few
smaller sizes, to check). A :class:`SymInt` is such a concrete size that also carries its
expression in the shape variables, as a polynomial (``batch * seq``, ``2 * seq + 1``), so that
the shape arithmetic a model does (``Shape`` → ``Gather`` → ``Mul`` → ``Concat`` →
``Reshape``) is traced exactly instead of being guessed from samples. It *is* an int: every
comparison, every shape function and every numpy call sees the concrete value, so code that
knows nothing of it works unchanged; arithmetic between sizes keeps the expression. A size
that went through something the tracing cannot follow (``int()``, a float) is a plain int
again, and the conversions at other sizes catch it if it was not constant after all.

Example:
    >>> batch, seq = SymInt.variable("batch", 8), SymInt.variable("seq", 64)
    >>> rows = batch * seq
    >>> rows, rows.text
    (512, 'batch * seq')
    >>> (rows * 32 // (batch * seq)), type(rows * 32 // (batch * seq)).__name__
    (32, 'int')
    >>> (2 * seq + 1).text, (seq - seq)
    ('2 * seq + 1', 0)
"""

from __future__ import annotations

from collections.abc import Mapping
from numbers import Integral
from typing import Any

__all__ = ["SymInt", "expression", "has_symbols", "sym_max", "sym_min", "symbolic_text"]

Monomial = tuple[str, ...]
"""Sorted factor names (a name repeated for a power); ``()`` is the constant term."""

Poly = tuple[tuple[Monomial, int], ...]


def _poly_of(value: int) -> dict[Monomial, int]:
    if isinstance(value, SymInt):
        return dict(value.poly)
    return {(): int(value)} if int(value) else {}


def _make(value: int, terms: Mapping[Monomial, int]) -> int:
    """A SymInt for ``terms``, or a plain int when no variable is left."""
    poly = tuple(sorted(((m, c) for m, c in terms.items() if c), key=_order))
    if all(not m for m, _ in poly):
        return int(value)
    return SymInt(value, poly)


def _order(term: tuple[Monomial, int]) -> tuple[int, Monomial]:
    return (-len(term[0]), term[0])


def _add(a: Mapping[Monomial, int], b: Mapping[Monomial, int], sign: int) -> dict[Monomial, int]:
    out = dict(a)
    for m, c in b.items():
        out[m] = out.get(m, 0) + sign * c
    return out


def _mul(a: Mapping[Monomial, int], b: Mapping[Monomial, int]) -> dict[Monomial, int]:
    out: dict[Monomial, int] = {}
    for ma, ca in a.items():
        for mb, cb in b.items():
            m = tuple(sorted(ma + mb))
            out[m] = out.get(m, 0) + ca * cb
    return out


def _divide(a: Mapping[Monomial, int], b: Mapping[Monomial, int]) -> dict[Monomial, int] | None:
    """``a / b`` when ``b`` is one term that divides every term of ``a`` exactly, else None."""
    if len(b) != 1:
        return None
    ((mb, cb),) = b.items()
    out: dict[Monomial, int] = {}
    for ma, ca in a.items():
        rest = list(ma)
        for factor in mb:
            if factor not in rest:
                return None
            rest.remove(factor)
        if ca % cb:
            return None
        out[tuple(rest)] = ca // cb
    return out


def _integral(value: Any) -> bool:
    """An int or a numpy integer (a size a constant array holds), not a bool."""
    return isinstance(value, Integral) and not isinstance(value, bool)


class SymInt(int):
    """A concrete size and its polynomial in the shape variables (see the module docstring).

    Attributes:
        poly: the terms ``((factors, coefficient), ...)``; a factor is a variable name or a
            parenthesized expression the polynomial cannot split (``(seq + 1) // 2``).
    """

    poly: Poly

    def __new__(cls, value: int, poly: Poly) -> SymInt:
        obj = super().__new__(cls, value)
        obj.poly = poly
        return obj

    @classmethod
    def variable(cls, name: str, value: int) -> SymInt:
        """The variable ``name``, whose value at this conversion is ``value``."""
        return cls(value, (((name,), 1),))

    @property
    def text(self) -> str:
        """The expression in the grammar of graph dimensions (``"2 * seq + 1"``)."""
        out = ""
        for monomial, coefficient in self.poly:
            factors = [*([str(abs(coefficient))] if abs(coefficient) != 1 or not monomial
                         else []), *monomial]
            term = " * ".join(factors)
            if not out:
                out = term if coefficient > 0 else f"-{term}"
            else:
                out += f" + {term}" if coefficient > 0 else f" - {term}"
        return out

    @property
    def variables(self) -> frozenset[str]:
        """The shape variables the expression reads."""
        from ..schema.symbolic import parse_dim

        return parse_dim(self.text).variables

    def __reduce__(self) -> Any:  # copies and pickles keep the expression
        return (SymInt, (int(self), self.poly))

    def __add__(self, other: Any) -> Any:
        if not _integral(other):
            return int(self) + other
        return _make(int(self) + int(other), _add(_poly_of(self), _poly_of(other), 1))

    __radd__ = __add__

    def __sub__(self, other: Any) -> Any:
        if not _integral(other):
            return int(self) - other
        return _make(int(self) - int(other), _add(_poly_of(self), _poly_of(other), -1))

    def __rsub__(self, other: Any) -> Any:
        if not _integral(other):
            return other - int(self)
        return _make(int(other) - int(self), _add(_poly_of(other), _poly_of(self), -1))

    def __mul__(self, other: Any) -> Any:
        if not _integral(other):
            return int(self) * other
        return _make(int(self) * int(other), _mul(_poly_of(self), _poly_of(other)))

    __rmul__ = __mul__

    def __neg__(self) -> Any:
        return _make(-int(self), {m: -c for m, c in self.poly})

    def __pos__(self) -> Any:
        return self

    def __floordiv__(self, other: Any) -> Any:
        if not _integral(other):
            return int(self) // other
        return _floordiv(self, other)

    def __rfloordiv__(self, other: Any) -> Any:
        if not _integral(other):
            return other // int(self)
        return _floordiv(other, self)

    def __mod__(self, other: Any) -> Any:
        if not _integral(other):
            return int(self) % other
        value = int(self) % int(other)
        if int(other) and _divide(_poly_of(self), _poly_of(other)) is not None:
            return 0  # divides exactly at every size, not only this one
        return value

    def __rmod__(self, other: Any) -> Any:
        if not _integral(other):
            return other % int(self)
        return int(other) % int(self)


def _floordiv(a: int, b: int) -> int:
    value = int(a) // int(b)
    pa, pb = _poly_of(a), _poly_of(b)
    exact = _divide(pa, pb) if int(b) else None
    if exact is not None:
        return _make(value, exact)
    if not isinstance(a, SymInt) and not isinstance(b, SymInt):
        return value
    atom = f"({_factor_text(a)} // {_factor_text(b)})"
    return _make(value, {(atom,): 1})


def _factor_text(value: int) -> str:
    """``value``'s expression, parenthesized unless it is a number or a bare variable."""
    bare = not isinstance(value, SymInt) or value.poly == (((value.text,), 1),)
    return expression(value) if bare else f"({expression(value)})"


def _pick(function: str, a: int, b: int) -> int:
    value = min(int(a), int(b)) if function == "min" else max(int(a), int(b))
    if not isinstance(a, SymInt) and not isinstance(b, SymInt):
        return value
    if _poly_of(a) == _poly_of(b):
        return a
    first, second = sorted((expression(a), expression(b)))
    return _make(value, {(f"{function}({first}, {second})",): 1})


def sym_min(a: int, b: int) -> int:
    """``min(a, b)``, keeping the expression when either is traced (``min(300, count)``).

    Example:
        >>> sym_min(300, SymInt.variable("count", 3000)).text
        'min(300, count)'
    """
    return _pick("min", a, b)


def sym_max(a: int, b: int) -> int:
    """``max(a, b)``, keeping the expression when either is traced."""
    return _pick("max", a, b)


def expression(value: int) -> str:
    """``value``'s expression: a SymInt's text, a plain int's digits."""
    return value.text if isinstance(value, SymInt) else str(int(value))


def symbolic_text(value: int) -> int | str:
    """A dimension as graph JSON writes it: an int, or the expression's text."""
    return value.text if isinstance(value, SymInt) else int(value)


def has_symbols(value: Any) -> bool:
    """Whether ``value`` (an int, or nested lists and tuples of them) holds a SymInt."""
    if isinstance(value, SymInt):
        return True
    if isinstance(value, list | tuple):
        return any(has_symbols(v) for v in value)
    return False
