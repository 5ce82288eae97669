"""Symbolic input dimensions (``dim_param``) as graphrt's bounded shape variables.

Every shape is concrete while converting, so a symbolic dimension is handled by converting
at several sizes: the model at ``n = max`` is the one emitted; the model at ``n = max - 1``
(and at a third point, to verify) must make the same steps with the same constants. Sizes are
traced while converting (:class:`~graphrt.onnx.symint.SymInt`): each dimension derived from
the variables carries its expression (``batch * seq``, ``2 * n + 1``), which is written into
the graph once the other conversions confirm it; a dimension the tracing lost must be an
affine function of the variables. A reshape whose target follows the variables is rewritten to
copy (``0``) or infer (``-1``) those dimensions, else it becomes ``reshape_symbolic`` (an
expand, ``broadcast_to_symbolic``), whose target is written in the variables. Anything else
that changes with the variable, such as a weight whose shape follows it, is a
:class:`ConversionError` naming the node and the variable, so that a graph that would only be
right at one size is never emitted.

Example:
    >>> sample_points({"batch": 8})
    [{'batch': 8}, {'batch': 7}, {'batch': 6}]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import ConversionError
from ..schema.symbolic import parse_dim
from .builder import Builder, ConvertedStep
from .symint import SymInt, has_symbols, symbolic_text

__all__ = ["generalize", "sample_points", "symbolic_bounds"]


def symbolic_bounds(graph: Any, shapes: Mapping[str, Any], constants: Mapping[str, Any],
                    dim_bounds: Mapping[str, int]) -> dict[str, int]:
    """The bound of every symbolic dimension the inputs use and ``dim_bounds`` sizes.

    Raises:
        ConversionError: a bound for a name no input uses, or a bound that is not a positive
            integer.
    """
    initializers = {t.name for t in graph.initializer}
    names: set[str] = set()
    for value_info in graph.input:
        if value_info.name in initializers or value_info.name in shapes or (
                value_info.name in constants):
            continue
        for dim in value_info.type.tensor_type.shape.dim:
            if dim.dim_param:
                names.add(dim.dim_param)
    for name, bound in dim_bounds.items():
        if name not in names:
            raise ConversionError(f"dim_bounds names {name!r}, but no graph input has that "
                                  f"symbolic dimension (they have: "
                                  f"{', '.join(sorted(names)) or 'none'})")
        if isinstance(bound, bool) or not isinstance(bound, int | np.integer) or bound < 1:
            raise ConversionError(f"dim_bounds[{name!r}] must be a positive int, given "
                                  f"{bound!r}")
    return {name: int(dim_bounds[name]) for name in sorted(dim_bounds)}


def sample_points(bounds: Mapping[str, int]) -> list[dict[str, int]]:
    """The sizes to convert at: all at their bound first, then each varied, then a check.

    A variable whose bound is 1 cannot vary and stays the constant 1.
    """
    base = dict(bounds)
    points = [base]
    varying = [name for name, bound in bounds.items() if bound >= 2]
    points += [{**base, name: bounds[name] - 1} for name in varying]
    check = {**base, **{name: bounds[name] - 2 if bounds[name] >= 3 else bounds[name] - 1
                        for name in varying}}
    if varying and check not in points:
        points.append(check)
    return points


def _expression(constant: int, coefficients: Mapping[str, int]) -> int | str:
    terms = []
    for name, a in coefficients.items():
        if a:
            terms.append((a, name))
    if not terms:
        return constant
    text = ""
    for a, name in terms:
        term = name if abs(a) == 1 else f"{abs(a)}*{name}"
        text += (term if a > 0 else f"-{term}") if not text else (
            f" + {term}" if a > 0 else f" - {term}")
    if constant:
        text += f" + {constant}" if constant > 0 else f" - {-constant}"
    return text


def _fit(values: Sequence[int], points: Sequence[Mapping[str, int]], varying: Sequence[str]
         ) -> tuple[int, dict[str, int]] | None:
    """``(c, {var: a})`` with value = c + sum(a * var) at every point, or None."""
    base = points[0]
    coefficients = {name: values[0] - values[1 + i] for i, name in enumerate(varying)}
    constant = values[0] - sum(a * base[name] for name, a in coefficients.items())
    for value, point in zip(values, points, strict=True):
        if constant + sum(a * point[name] for name, a in coefficients.items()) != value:
            return None
    return constant, coefficients


def _differ(where: str, what: str, points: Sequence[Mapping[str, int]]) -> ConversionError:
    shown = " and ".join(", ".join(f"{k}={v}" for k, v in p.items()) for p in points[:2])
    return ConversionError(f"{where}: {what} changes with the symbolic dimensions (converting "
                           f"at {shown}), so the model cannot keep them symbolic; give "
                           "concrete sizes with shapes={...} or dim_bounds with a fixed size")


def _rewrite_reshape(b: Builder, index: int, newshapes: list[list[int]],
                     input_shapes: list[tuple[int, ...]],
                     points: Sequence[Mapping[str, int]]) -> list[int]:
    step = b.steps[index]
    base = list(newshapes[0])
    varying = [p for p in range(len(base)) if len({tuple(s)[p] for s in newshapes}) > 1]
    left = []
    for p in varying:
        if all(p < len(shape) and shape[p] == target[p]
               for shape, target in zip(input_shapes, newshapes, strict=True)):
            base[p] = 0  # copies the input's dimension, whatever its size
        else:
            left.append(p)
    if len(left) == 1 and -1 not in base:
        base[left[0]] = -1
    elif left:
        raise _differ(step.source, f"the target shape of reshape {newshapes[0]}", points)
    return base


def _same(value: Any, base: np.ndarray[Any, Any]) -> bool:
    return value is not None and value.shape == base.shape and bool(np.array_equal(
        value, base, equal_nan=value.dtype.kind == "f"))


def _crop_by_reference(b: Builder, built: Sequence[tuple[Builder, list[str]]], name: str,
                       dims: dict[str, tuple[int | str, ...]]) -> bool:
    """Keep a constant that varies as its largest form, cut at run time to the size of a
    value whose dimension follows the same variables (``slice_like``), when at every size
    it is that largest form's leading part: position ids ``[:, :seq]`` of a table, say."""
    base = b.constants[name]
    for other, _ in built[1:]:
        value = other.constants.get(name)
        if value is None or value.ndim != base.ndim or any(
                d > e for d, e in zip(value.shape, base.shape, strict=True)):
            return False
        if not _same(value, base[tuple(slice(0, d) for d in value.shape)]):
            return False
    wanted = dims.get(name)
    if wanted is None:
        return False
    axes = [k for k, d in enumerate(wanted) if isinstance(d, str)]
    producers = {out: index for index, step in enumerate(b.steps) for out in step.outputs}
    for ref in [*b.inputs, *producers]:
        ref_dims = dims.get(ref, ())
        like_axes = [next((j for j, d in enumerate(ref_dims) if d == wanted[k]), -1)
                     for k in axes]
        at = producers[ref] + 1 if ref in producers else 0
        if not ref_dims or -1 in like_axes or any(name in s.inputs for s in b.steps[:at]):
            continue
        cropped = f"{name}:cropped"
        b.types[cropped] = b.types[name]
        dims[cropped] = wanted
        del dims[name]
        for step in b.steps[at:]:
            step.inputs = [cropped if v == name else v for v in step.inputs]
        user = next(step.source for step in b.steps if cropped in step.inputs)
        b.steps.insert(at, ConvertedStep("slice_like", [name, ref], [cropped],
                                {"axes": axes, "like_axes": like_axes}, user))
        return True
    return False


def _evaluate(value: Any, point: Mapping[str, int]) -> Any:
    """``value`` (an int or nested lists of them) with every SymInt evaluated at ``point``."""
    if isinstance(value, SymInt):
        return parse_dim(value.text).evaluate(point)
    if isinstance(value, list | tuple):
        return [_evaluate(v, point) for v in value]
    return value


def _traced(value: Any, values: Sequence[Any], points: Sequence[Mapping[str, int]]) -> bool:
    """Whether ``value`` holds traced sizes whose expressions give ``values`` at ``points``
    (the conversion at each point made what the expressions say it would)."""
    if not has_symbols(value):
        return False
    try:
        return all(_evaluate(value, point) == _evaluate(other, point)
                   for point, other in zip(points, values, strict=True))
    except (KeyError, ValueError, ZeroDivisionError):
        return False


def _refs(b: Builder, index: int, texts: Any, first: int) -> tuple[list[str],
                                                                    dict[str, list[int]]]:
    """The values whose shapes give the variables ``texts`` uses (nested lists holding
    expressions as ``{"dim": text}``), for step ``index``: each variable read from a value
    before the step that has it as a whole dimension (the step's first input, else the
    latest earlier value, else a graph input); ``dims`` numbers them from input ``first``."""
    step = b.steps[index]
    flat: list[str] = []
    todo = [texts]
    while todo:
        item = todo.pop()
        if isinstance(item, list | tuple):
            todo.extend(item)
        elif isinstance(item, dict) and set(item) == {"dim"}:
            flat.append(item["dim"])
    needed = sorted(set().union(*(parse_dim(t).variables for t in flat)))
    refs: list[str] = []
    dims: dict[str, list[int]] = {}
    earlier = [step.inputs[0], *(out for s in reversed(b.steps[:index]) for out in s.outputs),
               *b.inputs]
    for var in needed:
        found = next(((value, axis) for value in earlier if value in b.types for axis, d in
                      enumerate(b.types[value].shape)
                      if isinstance(d, SymInt) and d.poly == (((var,), 1),)), None)
        if found is None:
            raise ConversionError(f"{step.source}: op {step.op} depends on {var!r}, which no "
                                  "value before it has as a whole dimension")
        value, axis = found
        if value not in refs:
            refs.append(value)  # the step's own input too: input 0 is the one moved
        dims[var] = [first + refs.index(value), axis]
    return refs, dims


def _symbolic_target(b: Builder, index: int, op: str) -> None:
    """Make step ``index`` (a reshape or broadcast_to whose target follows the variables) its
    symbolic twin: the target as expressions, each variable read from a value's shape."""
    step = b.steps[index]
    texts = [symbolic_text(d) for d in b.types[step.outputs[0]].shape]  # 0 and -1 resolved
    refs, dims = _refs(b, index, [{"dim": t} for t in texts if isinstance(t, str)], 1)
    step.op = op
    step.inputs = [step.inputs[0], *refs]
    step.attrs = {"shape": texts, "dims": dims}


def _same_size(a: int, b: SymInt) -> bool:
    return isinstance(a, SymInt) and a.poly == b.poly


def _relative_reshape(b: Builder, step: ConvertedStep) -> list[int] | None:
    """A reshape target for ``step`` that copies (``0``) each traced dimension the input has
    at the same position and infers (``-1``) at most one other, or None."""
    source, shape = b.types[step.inputs[0]].shape, b.types[step.outputs[0]].shape
    target: list[int] = []
    free = []
    for p, d in enumerate(shape):
        if not isinstance(d, SymInt):
            if int(d) == 0:
                return None  # a 0 would read as "copy"
            target.append(int(d))
        elif p < len(source) and _same_size(source[p], d):
            target.append(0)
        else:
            free.append(p)
            target.append(-1)
    return target if len(free) <= 1 else None


def _template(value: Any) -> Any:
    """An attribute with each traced size written as its expression, ``{"dim": text}``."""
    if isinstance(value, SymInt):
        return {"dim": value.text}
    if isinstance(value, list | tuple):
        return [_template(v) for v in value]
    return value


def _with_shape_vars(b: Builder, index: int) -> None:
    """Make step ``index``, whose attributes hold traced sizes, ``with_shape_vars`` around
    its op: the attributes written in the variables, resolved per run from inputs' shapes."""
    step = b.steps[index]
    attrs = {key: _template(value) for key, value in step.attrs.items()}
    refs, dims = _refs(b, index, list(attrs.values()), len(step.inputs))
    step.attrs = {"op": step.op, "attrs": attrs, "dims": dims, "inputs": len(step.inputs),
                  "outputs": len(step.outputs)}
    step.op = "with_shape_vars"
    step.inputs = [*step.inputs, *refs]


def _symbolize(b: Builder, index: int) -> None:
    """Write step ``index``'s traced attributes in the variables (its attributes are known to
    agree with every conversion)."""
    step = b.steps[index]
    if step.op == "reshape":
        relative = _relative_reshape(b, step)
        if relative is not None:
            step.attrs["newshape"] = relative
        else:
            _symbolic_target(b, index, "reshape_symbolic")
    elif step.op == "broadcast_to":
        _symbolic_target(b, index, "broadcast_to_symbolic")
    else:
        _with_shape_vars(b, index)


def _plain(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return int(value) if isinstance(value, SymInt) else value


def _attributes(b: Builder, built: Sequence[tuple[Builder, list[str]]],
                points: Sequence[Mapping[str, int]]) -> None:
    """Settle every step's attributes: the same at every conversion, or traced sizes, which
    become relative or symbolic reshape targets or ``with_shape_vars``.

    Raises:
        ConversionError: an attribute that changes with the variables untraced.
    """
    for index, step in enumerate(b.steps):
        symbolic = False
        for key, value in list(step.attrs.items()):
            values = [other.steps[index].attrs.get(key) for other, _ in built]
            same = all(v == value for v in values)
            if same and not has_symbols(value):
                continue
            traced = _traced(value, values, points)
            if step.op == "reshape" and key == "newshape":
                relative = _relative_reshape(b, step) if traced else None
                if relative is not None:
                    step.attrs[key] = relative
                elif not traced:
                    step.attrs[key] = _rewrite_reshape(
                        b, index, [list(v or ()) for v in values],
                        [other.types[step.inputs[0]].shape for other, _ in built], points)
                else:
                    _symbolic_target(b, index, "reshape_symbolic")
                break
            if step.op == "broadcast_to" and key == "shape" and traced:
                _symbolic_target(b, index, "broadcast_to_symbolic")
                break
            if not traced:
                raise _differ(step.source, f"attribute {key!r} of op {step.op!r} "
                              f"({_plain(value)!r})", points)
            symbolic = True
        if symbolic and step.op not in ("reshape_symbolic", "broadcast_to_symbolic"):
            _with_shape_vars(b, index)


def generalize(points: Sequence[Mapping[str, int]],
               built: Sequence[tuple[Builder, list[str]]], bounds: Mapping[str, int]) -> None:
    """Make the first builder (converted at the bounds) symbolic, checking the others agree.

    Sets ``symbolic_dims`` and ``shape_vars`` on it, rewrites reshape targets, and cuts
    constants that follow a variable from their largest form at run time.

    Raises:
        ConversionError: the conversions differ in anything but affine dimensions and reshape
            targets, naming the node and what differs.
    """
    b, outputs = built[0]
    varying = [name for name, bound in bounds.items() if bound >= 2]
    # the variables data-dependent ops bind take, at each conversion, their bound there
    points = [{**point, **other.data_vars} for point, (other, _) in zip(points, built,
                                                                         strict=True)]
    for other, other_outputs in built[1:]:
        if len(other.steps) != len(b.steps) or other_outputs != outputs or (
                other.inputs != b.inputs):
            raise _differ("the graph", "the set of steps", points)
        for mine, theirs in zip(b.steps, other.steps, strict=True):
            if (mine.op, mine.inputs, mine.outputs) != (theirs.op, theirs.inputs,
                                                        theirs.outputs):
                raise _differ(mine.source, f"op {mine.op!r}", points)
    _attributes(b, built, points)
    used = {name for step in b.steps for name in step.inputs} | set(outputs)
    relevant = used | set(b.inputs) | {out for step in b.steps for out in step.outputs}
    dims: dict[str, tuple[int | str, ...]] = {}
    for name in sorted(relevant):
        found = _dims_of(name, built, points, varying)
        if found is not None:
            dims[name] = found
    pending = []
    for name in sorted(used & set(b.constants)):
        shape = b.types[name].shape
        if all(_same(other.constants.get(name), b.constants[name]) for other, _ in built[1:]
               ) and not has_symbols(shape):
            continue
        # a table sized by what a data-dependent op found was computed at one size only: no
        # other conversion shows it is a prefix of the largest, so it is made per run
        by_data = any(isinstance(d, SymInt) and d.variables & b.data_vars.keys()
                      for d in shape)
        if name in outputs or by_data or not _crop_by_reference(b, built, name, dims):
            pending.append(name)
    if pending:
        _materialize(b, built, points, varying, pending, dims)
    b.symbolic_dims = dims
    b.shape_vars = {name: (1, bound) for name, bound in bounds.items() if bound >= 2}
    b.shape_vars.update({name: (0, bound) for name, bound in b.data_vars.items()})


def _dims_of(name: str, built: Sequence[tuple[Builder, list[str]]],
             points: Sequence[Mapping[str, int]], varying: Sequence[str]
             ) -> tuple[int | str, ...] | None:
    """Value ``name``'s dimensions as the graph writes them, or None when they are fixed:
    each traced expression confirmed by every conversion, else an affine fit.

    Raises:
        ConversionError: the rank differs, or a dimension that is neither.
    """
    b = built[0][0]
    tensor = b.types[name]
    shapes = [other.types[name].shape if name in other.types else None for other, _ in built]
    if all(shape == tensor.shape for shape in shapes) and not has_symbols(tensor.shape):
        return None
    if any(shape is None or len(shape) != len(tensor.shape) for shape in shapes):
        raise _differ(f"value {name!r}", "the rank", points)
    symbolic: list[int | str] = []
    for axis in range(len(tensor.shape)):
        sizes = [shape[axis] for shape in shapes if shape is not None]
        if _traced(tensor.shape[axis], sizes, points):
            symbolic.append(symbolic_text(tensor.shape[axis]))
            continue
        fit = _fit(sizes, points, varying)
        if fit is None:
            raise _differ(f"value {name!r} dimension {axis}", "a size that is not an "
                          "affine function of the variables", points)
        symbolic.append(_expression(*fit))
    return tuple(symbolic)


def _materialize(b: Builder, built: Sequence[tuple[Builder, list[str]]],
                 points: Sequence[Mapping[str, int]], varying: Sequence[str],
                 names: Sequence[str], dims: dict[str, tuple[int | str, ...]]) -> None:
    """Compute at run time the constants in ``names``, which follow the variables and are read
    as data (a table of positions built with ``Range`` from a size, say): the steps that folded
    them at conversion are emitted again, back to ``shape_of`` and ``arange`` steps on the
    values whose sizes they read, before the first step that reads them. Their attributes must
    be the same at every conversion (or traced, for a reshape or expand target).

    Raises:
        ConversionError: a constant that follows the variables but was not made by steps
            graphrt can run again, naming the node that reads it.
    """
    first_use = {name: next((i for i, s in enumerate(b.steps) if name in s.inputs),
                            len(b.steps)) for name in names}
    emitted: set[str] = set()
    for name in sorted(names, key=first_use.__getitem__):
        at = next((i for i, s in enumerate(b.steps) if name in s.inputs), len(b.steps))
        user = b.steps[at].source if at < len(b.steps) else "a graph output"
        chain: list[ConvertedStep] = []
        _chain(b, built, points, name, user, emitted, chain)
        b.steps[at:at] = chain
        for index in range(at, at + len(chain)):
            step = b.steps[index]
            for out in step.outputs:
                b.constants.pop(out, None)
                b.shape_values.pop(out, None)
                found = _dims_of(out, built, points, varying)
                if found is not None:
                    dims[out] = found
            if has_symbols(list(step.attrs.values())):
                _symbolize(b, index)


def _chain(b: Builder, built: Sequence[tuple[Builder, list[str]]],
           points: Sequence[Mapping[str, int]], name: str, user: str, emitted: set[str],
           chain: list[ConvertedStep]) -> None:
    """Append to ``chain`` the steps that make constant ``name`` and the constants it needs
    that follow the variables (the others stay constants)."""
    if name in emitted or name not in b.constants:
        return
    agrees = all(_same(other.constants.get(name), b.constants[name]) for other, _ in built[1:])
    if agrees and not has_symbols(b.types[name].shape):
        return
    step = b.made.get(name)
    if step is None:
        raise _differ(user, f"a constant it reads ({name!r})", points)
    made = [other.made.get(name) for other, _ in built]
    if any(theirs is None or (theirs.op, theirs.inputs) != (step.op, step.inputs)
           for theirs in made) or not all(
            _traced(value, [theirs.attrs.get(key) for theirs in made if theirs], points)
            if any(theirs and theirs.attrs.get(key) != value for theirs in made) else True
            for key, value in step.attrs.items()):
        raise _differ(step.source, f"how a constant its successors read ({name!r}) is computed",
                      points)
    for source in step.inputs:
        _chain(b, built, points, source, user, emitted, chain)
    emitted.update(step.outputs)
    chain.append(ConvertedStep(step.op, list(step.inputs), list(step.outputs),
                               dict(step.attrs), step.source))
