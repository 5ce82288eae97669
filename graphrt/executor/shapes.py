"""Run-time shapes of a graph with symbolic dimensions.

Storage is planned at every variable's upper bound. Each run binds the variables in stages:
stage 0 from the inputs' shapes, then one stage per *shape node* (a node whose kernel's shape
function must run on the host: its output shape depends on data, or it binds a variable no
input binds). An entry is re-viewed at its actual shape in the first stage where all its
variables are known.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..errors import InputError
from ..lib import OpError, ShapeFunction
from ..schema import Entry, Expr, Graph
from ..schema.symbolic import Dim, dim_text

__all__ = ["ShapeNode", "ShapePlan"]


@dataclass(frozen=True)
class ShapeNode:
    """A node whose shape function runs before its kernel, and what it reads on the host."""

    nid: int
    function: ShapeFunction
    stage: int  # the stage its outputs' shapes open (1 for the first shape node)


def _show(dims: Sequence[Dim]) -> list[int | str]:
    return [dim_text(dim) for dim in dims]


class ShapePlan:
    """Binds shape variables and evaluates entry shapes, stage by stage.

    Example:
        >>> plan = ShapePlan(graph, shape_functions)  # doctest: +SKIP
        >>> env = plan.bind_inputs(input_shapes)  # doctest: +SKIP
        >>> plan.shape(eid, env)  # doctest: +SKIP
    """

    def __init__(self, graph: Graph, shape_functions: Mapping[int, ShapeFunction]) -> None:
        self.graph = graph
        self.nodes = tuple(ShapeNode(nid, shape_functions[nid], stage)
                           for stage, nid in enumerate(sorted(shape_functions), start=1))
        node_stage = {node.nid: node.stage for node in self.nodes}
        var_stage = {var: node_stage.get(binder, 0)
                     for var, binder in graph.var_binders.items()}
        stages: list[list[int]] = [[] for _ in range(len(self.nodes) + 1)]
        for entry in graph.entries:
            if entry.dims is not None:
                variables = set().union(*(d.variables for d in entry.dims
                                          if isinstance(d, Expr)))
                stage = max((var_stage[v] for v in variables), default=0)
                stages[min(stage, len(self.nodes))].append(entry.eid)
        self.stage_entries: tuple[tuple[int, ...], ...] = tuple(map(tuple, stages))
        self._inputs = tuple(graph.nodes[nid].outputs[0] for nid in graph.arg_nodes)
        self._ranges = {name: (var.min, var.max) for name, var in graph.shape_vars.items()}

    # -- inputs ----------------------------------------------------------------------------

    def check_input(self, eid: int, shape: tuple[int, ...], what: str) -> None:
        """Check one input's shape alone: rank, fixed dims, each variable within its bounds,
        each expression within the values it can take (whether it equals its value is
        checked when the run binds every variable, :meth:`bind_inputs`).

        Raises:
            InputError: naming the input, the dimension, the variable or expression and its
                bounds.
        """
        entry = self.graph.entries[eid]
        dims = entry.dims
        if dims is None:
            if shape != entry.shape:
                raise InputError(f"{what}: expected shape {entry.shape} {entry.dtype}, given "
                                 f"shape {shape}")
            return
        if len(shape) != len(dims):
            raise InputError(f"{what}: expected a {len(dims)}-D shape {_show(dims)}, given "
                             f"shape {shape}")
        for axis, (dim, size) in enumerate(zip(dims, shape, strict=True)):
            if isinstance(dim, int):
                if size != dim:
                    raise InputError(f"{what}: dimension {axis} must be {dim} (shape "
                                     f"{_show(dims)}), given shape {shape}")
            elif dim.is_variable:
                var = self.graph.shape_vars[dim.text]
                if not var.min <= size <= var.max:
                    raise InputError(
                        f"{what}: dimension {axis} binds shape variable {var.name!r} to {size}, "
                        f"outside its bounds [{var.min}, {var.max}] (given shape {shape})")
            else:
                low = max(dim.bounds(self._ranges)[0], 0)
                if not low <= size <= entry.shape[axis]:
                    ranges = ", ".join(f"{v} in [{self._ranges[v][0]}, {self._ranges[v][1]}]"
                                       for v in sorted(dim.variables))
                    raise InputError(
                        f"{what}: dimension {axis} = {dim.text} is {size}, outside the values "
                        f"[{low}, {entry.shape[axis]}] it takes for {ranges} (given shape "
                        f"{shape})")

    def bind_inputs(self, shapes: Sequence[tuple[int, ...]],
                    names: Sequence[str]) -> dict[str, int]:
        """The variables the inputs' shapes bind (stage 0), checked for consistency.

        Raises:
            InputError: two inputs disagree on a variable, or an expression dimension does not
                equal its value; naming the variable, its bounds and the inputs.
        """
        env: dict[str, int] = {}
        source: dict[str, str] = {}
        for eid, shape, name in zip(self._inputs, shapes, names, strict=True):
            dims = self.graph.entries[eid].dims
            for axis, dim in enumerate(dims or ()):
                if isinstance(dim, Expr) and dim.is_variable:
                    var, size = dim.text, shape[axis]
                    if var in env and env[var] != size:
                        bounds = self.graph.shape_vars[var]
                        raise InputError(
                            f"inputs disagree on shape variable {var!r} (bounds [{bounds.min}, "
                            f"{bounds.max}]): {source[var]} gives {env[var]}, input {name!r} "
                            f"dimension {axis} gives {size}")
                    env[var] = size
                    source[var] = f"input {name!r} dimension {axis}"
        for eid, shape, name in zip(self._inputs, shapes, names, strict=True):
            for axis, dim in enumerate(self.graph.entries[eid].dims or ()):
                if isinstance(dim, Expr) and not dim.is_variable:
                    value = self._evaluate(dim, env, f"input {name!r} dimension {axis}")
                    if value != shape[axis]:
                        bound = ", ".join(f"{v}={env[v]}" for v in sorted(dim.variables))
                        raise InputError(f"input {name!r} dimension {axis} is {shape[axis]}, "
                                         f"but {dim.text!r} = {value} with {bound}")
        return env

    def _evaluate(self, dim: Expr, env: Mapping[str, int], where: str) -> int:
        """``dim`` under ``env``; a variable no input bound or a division by 0 is an
        InputError naming ``where`` and the expression."""
        try:
            return dim.evaluate(env)
        except (KeyError, ZeroDivisionError) as err:
            missing = sorted(dim.variables - env.keys())
            problem = (f"{missing} not bound by any input" if missing
                       else f"{type(err).__name__}: {err}")
            raise InputError(f"{where} = {dim.text} cannot be evaluated: {problem}") from None

    # -- shapes ----------------------------------------------------------------------------

    def shape(self, eid: int, env: Mapping[str, int]) -> tuple[int, ...]:
        """The actual shape of a dynamic entry under ``env``.

        Raises:
            OpError: a dimension evaluates below 0 or above what was planned.
        """
        entry = self.graph.entries[eid]
        assert entry.dims is not None
        shape = tuple(dim if isinstance(dim, int) else dim.evaluate(env) for dim in entry.dims)
        for axis, (size, planned) in enumerate(zip(shape, entry.shape, strict=True)):
            if not 0 <= size <= planned:
                raise OpError(f"{self.graph.entry_label(eid)} dimension {axis} "
                              f"({dim_text(entry.dims[axis])!r}) is {size}, outside [0, "
                              f"{planned}] planned")
        return shape

    def bind_outputs(self, node: ShapeNode, shapes: Sequence[tuple[int, ...]],
                     env: dict[str, int]) -> None:
        """Bind the variables a shape function's results give, checking every dimension.

        Raises:
            OpError: wrong number of outputs or rank, a fixed dimension that differs, a
                variable out of its bounds (the graph planned storage for them).
        """
        outputs = self.graph.nodes[node.nid].outputs
        if len(shapes) != len(outputs):
            raise OpError(f"shape function returned {len(shapes)} shapes for "
                          f"{len(outputs)} outputs")
        for eid, shape in zip(outputs, shapes, strict=True):
            entry = self.graph.entries[eid]
            self._bind_entry(entry, shape, env)

    def _bind_entry(self, entry: Entry, shape: tuple[int, ...], env: dict[str, int]) -> None:
        dims: Sequence[Dim] = entry.dims if entry.dims is not None else entry.shape
        if len(shape) != len(dims):
            raise OpError(f"output {entry.index} has shape {list(shape)} but the graph gives "
                          f"{len(dims)}-D {_show(dims)}")
        for axis, (dim, size) in enumerate(zip(dims, shape, strict=True)):
            if isinstance(dim, Expr) and dim.is_variable and dim.text not in env:
                var = self.graph.shape_vars[dim.text]
                if not var.min <= size <= var.max:
                    raise OpError(
                        f"output {entry.index} dimension {axis} is {size}, which binds shape "
                        f"variable {var.name!r} outside its bounds [{var.min}, {var.max}]; "
                        "storage was planned for the upper bound, so graphrt refuses it")
                env[dim.text] = size
            expected = dim if isinstance(dim, int) else dim.evaluate(env)
            if size != expected:
                raise OpError(f"output {entry.index} has shape {list(shape)}, but the graph "
                              f"gives dimension {axis} as {dim_text(dim)!r} = {expected}")
