"""The normalized, immutable graph that the rest of graphrt works on.

:func:`build_graph` checks the meaning of a :class:`~graphrt.schema.spec.GraphSpec` (every
reference, length, dtype and count) and raises :class:`~graphrt.errors.GraphFormatError` naming
the node, entry or field at fault.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from math import prod
from types import MappingProxyType
from typing import Any

from ..errors import GraphFormatError, describe
from .dtypes import DType, dims_problem, parse_dtype, shape_problem
from .spec import GraphSpec, NodeSpec
from .symbolic import Dim, Expr, ShapeVar, dim_text, is_name, parse_dim

__all__ = ["Entry", "Graph", "Node", "build_graph"]

NOP = "__nop"
COPY = "__copy"
BUILTINS = (NOP, COPY)
_REQUIRED_OP_ATTRS = ("func_name", "num_inputs", "num_outputs", "flatten_data")
_GLOBAL_SCOPES = ("", "global")
_MAX_COUNT_DIGITS = 9


@dataclass(frozen=True, slots=True)
class Entry:
    """One tensor of the graph: output ``index`` of node ``nid``.

    ``device_type`` is the DLPack code of the ``device_index`` column, or None when the graph
    has no such column. ``scope`` is ``""`` for ordinary memory. ``dims`` is None for a static
    entry; for a dynamic one it holds the dimensions as written (ints and
    :class:`~graphrt.schema.symbolic.Expr`), and ``shape`` is then the planned shape: every
    dimension at its upper bound.
    """

    eid: int
    nid: int
    index: int
    shape: tuple[int, ...]
    dtype: DType
    sid: int
    device_type: int | None
    scope: str
    dims: tuple[Dim, ...] | None = None

    @property
    def nbytes(self) -> int:
        """Bytes the entry occupies (at the bound when dynamic): ``prod(shape) * itemsize``."""
        return prod(self.shape) * self.dtype.itemsize

    @property
    def shape_text(self) -> tuple[int | str, ...]:
        """The shape as the graph writes it: ints, and expressions' text where dynamic."""
        return self.shape if self.dims is None else tuple(dim_text(d) for d in self.dims)


@dataclass(frozen=True, slots=True)
class Node:
    """One node: an input placeholder (``op == "null"``) or an executable op."""

    nid: int
    name: str
    op: str
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    func_name: str | None
    flatten_data: bool
    attrs: Mapping[str, str]

    @property
    def label(self) -> str:
        """How errors name the node: ``node 3 'conv0'``."""
        return f"node {self.nid} {describe(self.name)}"


@dataclass(frozen=True)
class Graph:
    """A validated graph: nodes in execution order, entries, inputs and outputs.

    Attributes:
        nodes: every node, indexed by node id.
        entries: every entry, indexed by entry id.
        arg_nodes: node ids of the inputs (params included), in input order.
        heads: entry ids of the outputs, in output order.
        input_names: name of each input, in input order.
        output_names: name of each output, unique: its node's name, or ``name:index`` for a
            node with several outputs; when several outputs would get the same name (nodes
            named alike, as Relay's many ``reshape_nop``, or one entry listed twice in
            ``heads``), each of them is ``<that name>#<output position>``.
        output_aliases: each name several outputs would have shared, with the unique names
            they got instead (so looking it up can list the candidates).
        shape_vars: the declared shape variables by name (empty for a static graph).
        var_binders: for each shape variable, the node that binds it: an input node (from the
            shape it is given) or an op node (from its shape function at run time).
    """

    nodes: tuple[Node, ...]
    entries: tuple[Entry, ...]
    arg_nodes: tuple[int, ...]
    heads: tuple[int, ...]
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    shape_vars: Mapping[str, ShapeVar] = field(default_factory=lambda: MappingProxyType({}))
    var_binders: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    output_aliases: Mapping[str, tuple[str, ...]] = field(
        default_factory=lambda: MappingProxyType({}))

    @property
    def is_dynamic(self) -> bool:
        """Whether any entry has a symbolic dimension."""
        return bool(self.shape_vars) and any(e.dims is not None for e in self.entries)

    def entry_label(self, eid: int) -> str:
        """How errors name an entry: ``entry 7 (output 0 of node 5 'sub')``."""
        entry = self.entries[eid]
        return f"entry {eid} (output {entry.index} of {self.nodes[entry.nid].label})"


def _fail(where: str, problem: str) -> GraphFormatError:
    return GraphFormatError(f"{where}: {problem}")


def _node_where(nid: int, node: NodeSpec) -> str:
    return f"node {nid} {describe(node.name)}"


def _parse_count(node: NodeSpec, nid: int, attrs: Mapping[str, str], key: str) -> int:
    text = attrs[key]
    if not (text.isascii() and text.isdigit() and len(text) <= _MAX_COUNT_DIGITS):
        raise _fail(_node_where(nid, node), f"attr {key!r} must be a non-negative "
                    f"integer string, given {text[:40]!r} (at most {_MAX_COUNT_DIGITS} digits)")
    return int(text)


def _check_op_attrs(node: NodeSpec, nid: int) -> tuple[dict[str, str], int, int]:
    attrs = node.op_attrs
    missing = [key for key in _REQUIRED_OP_ATTRS if key not in attrs]
    if missing:
        raise _fail(_node_where(nid, node), f"op node lacks required attrs {missing}")
    num_inputs = _parse_count(node, nid, attrs, "num_inputs")
    num_outputs = _parse_count(node, nid, attrs, "num_outputs")
    if attrs["flatten_data"] not in ("0", "1"):
        raise _fail(_node_where(nid, node),
                    "attr 'flatten_data' must be \"0\" or \"1\", given "
                    f"{describe(attrs['flatten_data'])}")
    if num_inputs != len(node.inputs):
        raise _fail(_node_where(nid, node),
                    f"num_inputs is {num_inputs} but the node lists {len(node.inputs)} inputs")
    return attrs, num_inputs, num_outputs


def _check_row_ptr(spec: GraphSpec, outputs_per_node: list[int]) -> int:
    row_ptr = spec.node_row_ptr
    if len(row_ptr) != len(spec.nodes) + 1:
        raise _fail("node_row_ptr", f"expected {len(spec.nodes) + 1} values (nodes + 1), "
                    f"given {len(row_ptr)}")
    expected = 0
    for nid, count in enumerate(outputs_per_node):
        if row_ptr[nid] != expected:
            break
        expected += count
    else:
        nid = len(outputs_per_node)
        if row_ptr[nid] == expected:
            return expected
    raise _fail("node_row_ptr", f"value {nid} is {row_ptr[nid]}, expected {expected} (the running "
                "sum of the nodes' output counts)")


def _column(spec: GraphSpec, key: str, n_entries: int) -> list[Any] | None:
    column = getattr(spec.attrs, key)
    if column is None:
        return None
    values: list[Any] = column[1]
    if len(values) != n_entries:
        raise _fail(f"attrs column {key!r}", f"expected one value per entry ({n_entries}), "
                    f"given {len(values)}")
    return values


def _shape_vars(spec: GraphSpec) -> dict[str, ShapeVar]:
    declared = {}
    for name, bounds in (spec.shape_vars or {}).items():
        if not is_name(name):
            raise _fail("shape_vars", f"{describe(name)} is not a valid variable name (letters, "
                        "digits and _, not starting with a digit)")
        declared[name] = ShapeVar(name, bounds.min, bounds.max)
    return declared


def _dims(raw: list[int | str], where: str, shape_vars: Mapping[str, ShapeVar]
          ) -> tuple[tuple[int, ...], tuple[Dim, ...] | None]:
    """The planned shape (upper bounds) and, when any dimension is symbolic, the dims."""
    if all(isinstance(dim, int) for dim in raw):
        shape = tuple(int(dim) for dim in raw)
        if any(dim < 0 for dim in shape):
            raise _fail(where, f"shape {list(shape)} has a negative dimension")
        return shape, None
    dims: list[Dim] = []
    planned = []
    ranges = {name: (var.min, var.max) for name, var in shape_vars.items()}
    for axis, dim in enumerate(raw):
        if isinstance(dim, int):
            if dim < 0:
                raise _fail(where, f"shape {describe(raw)} has a negative dimension")
            dims.append(dim)
            planned.append(dim)
            continue
        try:
            expr = parse_dim(dim)
        except ValueError as err:
            raise _fail(where, f"dimension {axis} of shape {describe(raw)}: {err}") from None
        undeclared = sorted(expr.variables - shape_vars.keys())
        if undeclared:
            declared = describe(sorted(shape_vars))
            raise _fail(where, f"dimension {axis} ({describe(dim)}) uses {undeclared}, not "
                        f"declared in the graph's shape_vars (declared: {declared})")
        try:
            planned.append(max(expr.bounds(ranges)[1], 0))
        except ValueError as err:
            raise _fail(where, f"dimension {axis} ({describe(dim)}): {err}") from None
        dims.append(expr)
    return tuple(planned), tuple(dims)


def _build_entries(spec: GraphSpec, nodes: list[NodeSpec], row_ptr: list[int],
                   shape_vars: Mapping[str, ShapeVar]) -> list[Entry]:
    n_entries = row_ptr[-1]
    dltypes = _column(spec, "dltype", n_entries)
    shapes = _column(spec, "shape", n_entries)
    sids = _column(spec, "storage_id", n_entries)
    device_types = _column(spec, "device_index", n_entries)
    scopes = _column(spec, "storage_scope", n_entries)
    assert dltypes is not None and shapes is not None and sids is not None  # required columns
    entries = []
    for nid, node in enumerate(nodes):
        for index in range(row_ptr[nid + 1] - row_ptr[nid]):
            eid = row_ptr[nid] + index
            where = f"entry {eid} (output {index} of node {nid} {describe(node.name)})"
            try:
                dtype = parse_dtype(str(dltypes[eid]))
            except ValueError as err:
                raise _fail(where, str(err)) from None
            shape, dims = _dims(shapes[eid], where, shape_vars)
            # An empty tensor takes no memory, so only numpy's rule can refuse its shape; a
            # non-empty one too large is refused by planning, naming the device it would not fit.
            problem = shape_problem(shape, dtype.itemsize) if 0 in shape else dims_problem(shape)
            if problem is not None:
                raise _fail(where, problem)
            sid = sids[eid]
            if sid < 0:
                raise _fail(where, f"storage_id is {sid}, must be >= 0")
            device_type = None if device_types is None else device_types[eid]
            if device_type is not None and device_type < 1:
                raise _fail(where, f"device_index is {device_type}; it must be a DLPack device "
                            "type code (1 = CPU, 2 = CUDA, 12 = ext_dev)")
            scope = "" if scopes is None else str(scopes[eid])
            entries.append(Entry(eid, nid, index, shape, dtype, sid, device_type,
                                 "" if scope in _GLOBAL_SCOPES else scope, dims))
    return entries


def _resolve_ref(ref: list[int], where: str, nid_limit: int, row_ptr: list[int],
                 names: list[str]) -> int:
    src, index = ref[0], ref[1]
    if not 0 <= src < nid_limit:
        raise _fail(where, f"refers to node {src}, which is not an earlier node "
                    f"(valid: 0..{nid_limit - 1})")
    count = row_ptr[src + 1] - row_ptr[src]
    if not 0 <= index < count:
        raise _fail(where, f"refers to output {index} of node {src} {describe(names[src])}, "
                    f"which has {count} output(s)")
    return row_ptr[src] + index


def build_graph(spec: GraphSpec) -> Graph:
    """Check a parsed graph document and build the normalized :class:`Graph`.

    Raises:
        GraphFormatError: naming the node (id and name), entry or field at fault.

    Example:
        >>> from graphrt.schema import parse_spec
        >>> spec = parse_spec('{"nodes": [{"op": "null", "name": "x", "inputs": []}], '
        ...     '"arg_nodes": [0], "node_row_ptr": [0, 1], "heads": [[0, 0, 0]], "attrs": {'
        ...     '"dltype": ["list_str", ["float32"]], "shape": ["list_shape", [[2]]], '
        ...     '"storage_id": ["list_int", [0]]}}')
        >>> build_graph(spec).input_names
        ('x',)
    """
    specs = spec.nodes
    names = [node.name for node in specs]
    counts: list[int] = []
    op_info: list[tuple[dict[str, str], int] | None] = []
    for nid, node in enumerate(specs):
        if node.op == "null":
            if node.inputs:
                raise _fail(_node_where(nid, node), "an input (null) node cannot have "
                            "inputs")
            counts.append(1)
            op_info.append(None)
        else:
            attrs, _, num_outputs = _check_op_attrs(node, nid)
            counts.append(num_outputs)
            op_info.append((attrs, num_outputs))
    _check_row_ptr(spec, counts)
    row_ptr = spec.node_row_ptr
    shape_vars = _shape_vars(spec)
    entries = _build_entries(spec, specs, row_ptr, shape_vars)

    nodes = []
    for nid, node in enumerate(specs):
        inputs = tuple(
            _resolve_ref(ref, f"{_node_where(nid, node)} input {i}", nid, row_ptr, names)
            for i, ref in enumerate(node.inputs)
        )
        outputs = tuple(range(row_ptr[nid], row_ptr[nid + 1]))
        info = op_info[nid]
        attrs = info[0] if info else node.op_attrs
        nodes.append(Node(nid, node.name, node.op, inputs, outputs,
                          attrs["func_name"] if info else None,
                          attrs.get("flatten_data") == "1", MappingProxyType(attrs)))

    arg_nodes = _check_arg_nodes(spec, nodes)
    heads = tuple(_resolve_ref(ref, f"heads[{i}]", len(nodes), row_ptr, names)
                  for i, ref in enumerate(spec.heads))
    bases = [_output_name(nodes[entries[eid].nid], entries[eid].index) for eid in heads]
    shared = {base for base, count in Counter(bases).items() if count > 1}
    output_names = tuple(f"{base}#{i}" if base in shared else base
                         for i, base in enumerate(bases))
    grouped: dict[str, list[str]] = {}
    for name, base in zip(output_names, bases, strict=True):
        if base in shared:
            grouped.setdefault(base, []).append(name)
    aliases = {base: tuple(grouped[base]) for base in sorted(grouped)}
    graph = Graph(tuple(nodes), tuple(entries), arg_nodes, heads,
                  tuple(nodes[nid].name for nid in arg_nodes), output_names,
                  MappingProxyType(shape_vars), MappingProxyType(_var_binders(nodes, entries,
                                                                              arg_nodes)),
                  MappingProxyType(aliases))
    for built in graph.nodes:
        if built.func_name in BUILTINS:
            _check_builtin(graph, built)
    return graph


def _var_binders(nodes: list[Node], entries: list[Entry], arg_nodes: tuple[int, ...]
                 ) -> dict[str, int]:
    """Which node binds each shape variable used, checking that nothing uses one before.

    A variable that is a bare dimension of an input is bound from the input's shape before the
    run starts; otherwise the first op node with it as a bare output dimension binds it from its
    shape function, and no earlier node may use it.
    """
    inputs = set(arg_nodes)
    binders: dict[str, int] = {}
    for stage in (True, False):  # every input first, then op nodes in execution order
        for entry in entries:
            if entry.dims is not None and (entry.nid in inputs) == stage:
                for dim in entry.dims:
                    if isinstance(dim, Expr) and dim.is_variable:
                        binders.setdefault(str(dim.tree), entry.nid)
    for entry in entries:
        for axis, dim in enumerate(entry.dims or ()):
            if not isinstance(dim, Expr):
                continue
            for var in sorted(dim.variables):
                where = (f"entry {entry.eid} (output {entry.index} of "
                         f"{nodes[entry.nid].label}) dimension {axis} ({dim.text!r})")
                binder = binders.get(var)
                if binder is None:
                    raise _fail(where, f"variable {var!r} is never bound: no input has it as a "
                                "dimension and no node's output has it as a bare dimension")
                if binder not in inputs and (entry.nid in inputs or entry.nid < binder):
                    raise _fail(where, f"uses variable {var!r} before {nodes[binder].label} "
                                "binds it")
    return binders


def _output_name(node: Node, index: int) -> str:
    return node.name if len(node.outputs) == 1 else f"{node.name}:{index}"


def _check_arg_nodes(spec: GraphSpec, nodes: list[Node]) -> tuple[int, ...]:
    seen: dict[str, int] = {}
    for i, nid in enumerate(spec.arg_nodes):
        if not 0 <= nid < len(nodes):
            raise _fail(f"arg_nodes[{i}]", f"node id {nid} does not exist "
                        f"(the graph has {len(nodes)} nodes)")
        node = nodes[nid]
        if node.op != "null":
            raise _fail(f"arg_nodes[{i}]", f"{node.label} is an op node, not an input (null) node")
        if node.name in seen:
            raise _fail(f"arg_nodes[{i}]", f"{node.label} has the same name as input node "
                        f"{seen[node.name]}; input names must be unique")
        seen[node.name] = nid
    for node in nodes:
        if node.op == "null" and node.name not in seen:
            raise _fail(node.label, "input (null) node is not listed in arg_nodes, so it could "
                        "never be set")
    return tuple(spec.arg_nodes)


def _check_builtin(graph: Graph, node: Node) -> None:
    if len(node.inputs) != 1 or len(node.outputs) != 1:
        raise _fail(node.label, f"{node.func_name} takes exactly 1 input and 1 output, given "
                    f"{len(node.inputs)} and {len(node.outputs)}")
    src, dst = graph.entries[node.inputs[0]], graph.entries[node.outputs[0]]
    if src.nbytes != dst.nbytes or src.dtype != dst.dtype:
        raise _fail(node.label, f"{node.func_name} input is {src.dtype}{list(src.shape)} but its "
                    f"output is {dst.dtype}{list(dst.shape)}; both must hold the same data")
    if node.func_name == NOP and src.sid != dst.sid:
        raise _fail(node.label, f"__nop output {dst.eid} uses storage_id {dst.sid} but its input "
                    f"{src.eid} uses {src.sid}; a __nop must alias its input's storage")
