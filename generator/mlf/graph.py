"""The graph executor's JSON (`executor-config/graph/<mod>.graph` or `graph.json`)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from generator.errors import MlfError
from generator.mlf.model import ShapedTensor


@dataclass
class GraphIO:
    """The graph's free inputs (arg nodes that are not params) and its outputs (heads)."""

    inputs: list[ShapedTensor]
    outputs: list[ShapedTensor]
    node_count: int


def graph_io(text: str, param_names: set[str], where: str) -> GraphIO:
    try:
        graph = json.loads(text)
        nodes = graph["nodes"]
        row_ptr = graph["node_row_ptr"]
        shapes = graph["attrs"]["shape"][1]
        dtypes = graph["attrs"]["dltype"][1]

        def entry(nid: int, index: int, name: str) -> ShapedTensor:
            eid = row_ptr[nid] + index
            return ShapedTensor(name, tuple(int(d) for d in shapes[eid]), str(dtypes[eid]))

        inputs = [entry(nid, 0, nodes[nid]["name"]) for nid in graph["arg_nodes"]
                  if nodes[nid]["name"] not in param_names]
        heads = graph["heads"]
        names = ["output"] if len(heads) == 1 else [f"output{i}" for i in range(len(heads))]
        outputs = [entry(h[0], h[1], n) for h, n in zip(heads, names, strict=True)]
        return GraphIO(inputs, outputs, len(nodes))
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise MlfError(f"{where}: malformed graph JSON ({type(exc).__name__}: {exc})") from exc
