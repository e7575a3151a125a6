"""The graph executor's JSON (`executor-config/graph/<mod>.graph` or `graph.json`)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from generator.errors import MlfError
from generator.mlf.model import dtype_bits


@dataclass(frozen=True)
class GraphTensor:
    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def size_bytes(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return (n * dtype_bits(self.dtype) + 7) // 8


@dataclass
class GraphIO:
    """The graph's free inputs (arg nodes that are not params) and its outputs (heads)."""

    inputs: list[GraphTensor]
    outputs: list[GraphTensor]
    node_count: int


def graph_io(text: str, param_names: set[str], where: str) -> GraphIO:
    try:
        graph = json.loads(text)
        nodes = graph["nodes"]
        row_ptr = graph["node_row_ptr"]
        shapes = graph["attrs"]["shape"][1]
        dtypes = graph["attrs"]["dltype"][1]

        def entry(nid: int, index: int, name: str) -> GraphTensor:
            eid = row_ptr[nid] + index
            return GraphTensor(name, str(dtypes[eid]), tuple(int(d) for d in shapes[eid]))

        inputs = [entry(nid, 0, nodes[nid]["name"]) for nid in graph["arg_nodes"]
                  if nodes[nid]["name"] not in param_names]
        heads = graph["heads"]
        names = ["output"] if len(heads) == 1 else [f"output{i}" for i in range(len(heads))]
        outputs = [entry(h[0], h[1], n) for h, n in zip(heads, names, strict=True)]
        return GraphIO(inputs, outputs, len(nodes))
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise MlfError(f"{where}: malformed graph JSON ({type(exc).__name__}: {exc})") from exc
