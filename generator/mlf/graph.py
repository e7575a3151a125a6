"""The graph executor's JSON (`executor-config/graph/<mod>.graph` or `graph.json`).

`parse_graph` turns the text into a typed `Graph`. `Graph.problems` lists what our
on-device executor (templates/common/src/graph.c) would refuse, in the same words, so the
generator refuses it first. `Graph.storage_plan` computes the RAM that executor will carve
for the storage ids with the same rule as `mtvg_graph_storage_bytes`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from generator import abi
from generator.errors import MlfError
from generator.mlf.dtypes import DTYPE_RE, ShapedTensor, dtype_bits
from generator.mlf.safejson import load_bounded

STORAGE_ALIGN = abi.constant("MTVG_GRAPH_STORAGE_ALIGN")
MAX_NAME_BYTES = abi.constant("MTVG_GRAPH_MAX_NAME_BYTES")
MAX_OP_ARGS = abi.constant("MTVG_GRAPH_MAX_OP_ARGS")  # the default (the project sets its own)
MAX_NDIM = abi.constant("MTVG_GRAPH_MAX_NDIM")  # the default


@dataclass(frozen=True)
class GraphNode:
    name: str
    op: str  # "null" | "tvm_op" | anything else the file says
    func_name: str | None
    num_inputs: int
    num_outputs: int
    inputs: tuple[tuple[int, int], ...]
    flatten_data: str | None


@dataclass(frozen=True)
class GraphEntry:
    storage_id: int
    dtype: str
    shape: tuple[int, ...]

    @property
    def size_bytes(self) -> int:
        n = (dtype_bits(self.dtype) + 7) // 8
        for d in self.shape:
            n *= d
        return n


@dataclass
class StoragePlan:
    """Where each storage id of the graph lives on the device."""

    ram_bytes: int  # arena bytes mtvg_graph_plan() carves (alignment included)
    params_in_place_bytes: int  # parameters used straight from flash
    params_copied_bytes: int  # parameters copied to RAM (misaligned in the blob)
    storage_ids: int


@dataclass
class Graph:
    nodes: list[GraphNode]
    arg_nodes: list[int]
    heads: list[tuple[int, int]]
    row_ptr: list[int]
    entries: list[GraphEntry]
    device_indices: list[int] = field(default_factory=list)
    has_storage_scope: bool = False

    def entry_id(self, node: int, index: int) -> int:
        return self.row_ptr[node] + index

    def storage_sizes(self) -> dict[int, int]:
        sizes: dict[int, int] = {}
        for e in self.entries:
            sizes[e.storage_id] = max(sizes.get(e.storage_id, 0), e.size_bytes)
        return sizes

    def storage_users(self) -> dict[int, int]:
        users: dict[int, int] = {}
        for e in self.entries:
            users[e.storage_id] = users.get(e.storage_id, 0) + 1
        return users

    def op_nodes(self) -> list[GraphNode]:
        return [n for n in self.nodes if n.op == "tvm_op" and n.func_name != "__nop"]

    def arg_names(self) -> list[str]:
        return [self.nodes[nid].name for nid in self.arg_nodes]

    def func_names(self) -> list[str]:
        """Distinct operator functions, in first-use order."""
        seen: dict[str, None] = {}
        for n in self.op_nodes():
            if n.func_name:
                seen.setdefault(n.func_name, None)
        return list(seen)

    def problems(self) -> list[str]:
        """What the on-device executor does not support, one sentence each."""
        out = []
        if self.has_storage_scope:
            out.append("the graph has storage_scope (memory scopes), which is not supported")
        if any(d != 1 for d in self.device_indices):
            out.append("the graph places nodes on devices other than the CPU (device_index), "
                       "which is not supported")
        for i, n in enumerate(self.nodes):
            if n.op not in ("null", "tvm_op"):
                out.append(f"node {i} '{n.name}' has op '{n.op}'; only 'tvm_op' is supported")
                continue
            if n.op == "null":
                if n.num_outputs != 1:
                    out.append(f"input node {i} '{n.name}' has {n.num_outputs} outputs; "
                               "input nodes have one")
                continue
            if n.func_name is None:
                out.append(f"node {i} '{n.name}' has no func_name")
            elif n.func_name.startswith("__") and n.func_name != "__nop":
                out.append(f"node {i} '{n.name}' calls the special function '{n.func_name}', "
                           "which is not supported")
            elif n.func_name == "__nop" and not self._nop_in_place(i):
                out.append(f"node {i} '{n.name}' is a __nop (reshape) whose output is not its "
                           "input's storage; not supported")
            if n.flatten_data not in (None, "0"):
                out.append(f"node {i} '{n.name}' has flatten_data={n.flatten_data}; "
                           "not supported")
            if n.num_inputs + n.num_outputs > MAX_OP_ARGS:
                out.append(f"node {i} '{n.name}' takes more than {MAX_OP_ARGS} tensors")
        for what, name in [("node", n.name) for n in self.nodes] + \
                [("function", f) for f in self.func_names()]:
            if len(name.encode()) > MAX_NAME_BYTES:
                out.append(f"a {what} name is longer than {MAX_NAME_BYTES} bytes")
        for e in self.entries:
            if not _supported_dtype(e.dtype):
                out.append(f"dtype '{e.dtype}' is not supported")
            if len(e.shape) > MAX_NDIM:
                out.append(f"a tensor has {len(e.shape)} dimensions (at most {MAX_NDIM})")
        return list(dict.fromkeys(out))

    def _nop_in_place(self, nid: int) -> bool:
        node = self.nodes[nid]
        if len(node.inputs) != 1 or node.num_outputs != 1:
            return False
        src = self.entries[self.entry_id(*node.inputs[0])]
        dst = self.entries[self.entry_id(nid, 0)]
        return src.storage_id == dst.storage_id and src.size_bytes == dst.size_bytes

    def param_problems(self, params: dict[str, tuple[str, tuple[int, ...]]]) -> list[str]:
        """Mismatches between the graph and a params file (name -> (dtype, shape))."""
        out = []
        arg_names = {self.nodes[a].name: a for a in self.arg_nodes}
        users = self.storage_users()
        for name, (dtype, shape) in params.items():
            nid = arg_names.get(name)
            if nid is None:
                out.append(f"parameter '{name}' is not an input of the graph")
                continue
            entry = self.entries[self.entry_id(nid, 0)]
            if entry.dtype != dtype or tuple(entry.shape) != tuple(shape):
                out.append(f"parameter '{name}' is {dtype}{list(shape)} in the params file "
                           f"but {entry.dtype}{list(entry.shape)} in the graph")
            elif users[entry.storage_id] != 1:
                out.append(f"parameter '{name}' shares its storage id with other tensors")
        return out

    def storage_plan(self, param_offsets: dict[str, tuple[int, str]]) -> StoragePlan:
        """RAM for the storage ids, as mtvg_graph_plan() carves it.

        `param_offsets` maps each parameter to (offset of its data in the params blob,
        dtype). The firmware aligns the blob to 16 bytes, so a parameter is used in place
        when its offset is a multiple of its element's natural alignment.
        """
        sizes = self.storage_sizes()
        in_place: set[int] = set()
        copied = in_place_bytes = 0
        arg_names = {self.nodes[a].name: a for a in self.arg_nodes}
        for name, (offset, dtype) in param_offsets.items():
            nid = arg_names.get(name)
            if nid is None:
                continue
            sid = self.entries[self.entry_id(nid, 0)].storage_id
            if offset % _element_align(dtype) == 0:
                in_place.add(sid)
                in_place_bytes += sizes[sid]
            else:
                copied += sizes[sid]
        total = 0
        for sid in sorted(sizes):
            if sid in in_place:
                continue
            total = _align(total) + sizes[sid]
        return StoragePlan(_align(total), in_place_bytes, copied, len(sizes))

    def limits(self) -> dict[str, int]:
        """The MTVG_GRAPH_MAX_* values that fit exactly this graph."""
        ndims = [len(e.shape) for e in self.entries]
        args = [n.num_inputs + n.num_outputs for n in self.op_nodes()]
        return {
            "MTVG_GRAPH_MAX_NODES": max(1, len(self.nodes)),
            "MTVG_GRAPH_MAX_ENTRIES": max(1, len(self.entries)),
            "MTVG_GRAPH_MAX_STORAGE": max(1, max(self.storage_sizes(), default=0) + 1),
            "MTVG_GRAPH_MAX_INPUT_REFS": max(1, sum(len(n.inputs) for n in self.nodes)),
            "MTVG_GRAPH_MAX_HEADS": max(1, len(self.heads)),
            "MTVG_GRAPH_MAX_NDIM": max(1, *ndims) if ndims else 1,
            "MTVG_GRAPH_MAX_OP_ARGS": max(1, *args) if args else 1,
        }

    def compact_json(self) -> str:
        """The same graph with only the keys the executor reads, without spaces."""
        nodes = []
        for n in self.nodes:
            node: dict = {"op": n.op, "name": n.name,
                          "inputs": [[a, b, 0] for a, b in n.inputs]}
            if n.op == "tvm_op":
                node["attrs"] = {"func_name": n.func_name or "",
                                 "num_inputs": str(n.num_inputs),
                                 "num_outputs": str(n.num_outputs),
                                 "flatten_data": n.flatten_data or "0"}
            nodes.append(node)
        graph = {
            "nodes": nodes,
            "arg_nodes": self.arg_nodes,
            "heads": [[a, b, 0] for a, b in self.heads],
            "attrs": {
                "dltype": ["list_str", [e.dtype for e in self.entries]],
                "storage_id": ["list_int", [e.storage_id for e in self.entries]],
                "shape": ["list_shape", [list(e.shape) for e in self.entries]],
            },
            "node_row_ptr": self.row_ptr,
        }
        return json.dumps(graph, separators=(",", ":"), ensure_ascii=False)


def _supported_dtype(dtype: str) -> bool:
    m = DTYPE_RE.match(dtype)
    return bool(m) and (dtype == "bool" or m.group(2) in ("8", "16", "32", "64"))


def _align(n: int) -> int:
    return (n + STORAGE_ALIGN - 1) // STORAGE_ALIGN * STORAGE_ALIGN


def _element_align(dtype: str) -> int:
    size = (dtype_bits(dtype) + 7) // 8
    return 8 if size >= 8 else 4 if size >= 4 else 2 if size >= 2 else 1


def _ref(value) -> tuple[int, int]:
    if not isinstance(value, list) or len(value) not in (2, 3) or \
            not all(isinstance(v, int) and v >= 0 for v in value):
        raise ValueError(f"bad node reference {value!r}")
    return value[0], value[1]


def _tagged(attrs: dict, key: str, tag: str, required: bool = True) -> list:
    value = attrs.get(key)
    if value is None and not required:
        return []
    if not (isinstance(value, list) and len(value) == 2 and value[0] == tag
            and isinstance(value[1], list)):
        raise ValueError(f"attrs.{key} is not [\"{tag}\", [...]]")
    return value[1]


def _text(value) -> str:
    """A JSON value as text that can be written out as UTF-8 (no lone surrogates)."""
    text = str(value)
    text.encode("utf-8")  # UnicodeEncodeError is a ValueError: a malformed graph
    return text


def parse_graph(text: str, where: str) -> Graph:
    """Read the graph JSON; malformed structure raises MlfError."""
    raw = load_bounded(text, where)
    try:
        nodes = []
        for n in raw["nodes"]:
            attrs = n.get("attrs", n.get("attr", {})) or {}
            op = _text(n["op"])
            num_in = int(attrs.get("num_inputs", len(n.get("inputs", []))))
            num_out = int(attrs.get("num_outputs", 1))
            nodes.append(GraphNode(
                name=_text(n["name"]), op=op,
                func_name=_text(attrs["func_name"]) if "func_name" in attrs else None,
                num_inputs=num_in, num_outputs=num_out,
                inputs=tuple(_ref(r) for r in n.get("inputs", [])),
                flatten_data=_text(attrs["flatten_data"]) if "flatten_data" in attrs else None))
        attrs = raw["attrs"]
        dtypes = _tagged(attrs, "dltype", "list_str")
        sids = _tagged(attrs, "storage_id", "list_int")
        shapes = _tagged(attrs, "shape", "list_shape")
        row_ptr = [int(v) for v in raw["node_row_ptr"]]
        graph = Graph(
            nodes=nodes,
            arg_nodes=[int(a) for a in raw["arg_nodes"]],
            heads=[_ref(h) for h in raw["heads"]],
            row_ptr=row_ptr,
            entries=[GraphEntry(int(s), _text(d), tuple(int(x) for x in sh))
                     for s, d, sh in zip(sids, dtypes, shapes, strict=True)],
            device_indices=[int(d) for d in _tagged(attrs, "device_index", "list_int", False)],
            has_storage_scope="storage_scope" in attrs,
        )
        _check_structure(graph)
        return graph
    except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
        raise MlfError(f"{where}: malformed graph JSON ({type(exc).__name__}: {exc})") from exc


def _check_structure(g: Graph) -> None:
    if not g.nodes:
        raise ValueError("no nodes")
    if len(g.row_ptr) != len(g.nodes) + 1 or g.row_ptr[0] != 0:
        raise ValueError("node_row_ptr must have one element more than nodes, starting at 0")
    for i, n in enumerate(g.nodes):
        if g.row_ptr[i + 1] - g.row_ptr[i] != n.num_outputs:
            raise ValueError(f"node_row_ptr does not match node {i}'s outputs")
        if n.op == "tvm_op" and len(n.inputs) != n.num_inputs:
            raise ValueError(f"node {i}: num_inputs differs from its inputs list")
        for src, idx in n.inputs:
            if src >= i or idx >= g.nodes[src].num_outputs:
                raise ValueError(f"node {i}: an input refers to a missing or later node")
    if len(g.entries) != g.row_ptr[-1]:
        raise ValueError("attrs lists do not have one element per entry")
    if any(e.storage_id < 0 or any(d < 0 for d in e.shape) for e in g.entries):
        raise ValueError("negative storage id or dimension")
    for dtype in {e.dtype for e in g.entries}:
        if not DTYPE_RE.match(dtype) or dtype_bits(dtype) == 0:
            raise ValueError(f"'{dtype[:40]}' is not a dtype")
    for a in g.arg_nodes:
        if not 0 <= a < len(g.nodes) or g.nodes[a].op != "null":
            raise ValueError("arg_nodes names a node that is not an input")
    for nid, idx in g.heads:
        if nid >= len(g.nodes) or idx >= g.nodes[nid].num_outputs:
            raise ValueError("heads refers to a missing node")


@dataclass
class GraphIO:
    """The graph's free inputs (arg nodes that are not params) and its outputs (heads)."""

    inputs: list[ShapedTensor]
    outputs: list[ShapedTensor]
    node_count: int


def graph_io(graph: Graph, param_names: set[str]) -> GraphIO:
    def entry(nid: int, index: int, name: str) -> ShapedTensor:
        e = graph.entries[graph.entry_id(nid, index)]
        return ShapedTensor(name, e.shape, e.dtype)

    inputs = [entry(nid, 0, graph.nodes[nid].name) for nid in graph.arg_nodes
              if graph.nodes[nid].name not in param_names]
    names = ["output"] if len(graph.heads) == 1 else [f"output{i}" for i in
                                                       range(len(graph.heads))]
    outputs = [entry(h[0], h[1], n) for h, n in zip(graph.heads, names, strict=True)]
    return GraphIO(inputs, outputs, len(graph.nodes))
