"""The bound: the deepest path through the call graph from the roots, a handler on top; or
why there is none (recursion, what the call graph cannot follow)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from generator.errors import InputError
from generator.report.model import StackBound
from generator.report.stack.callgraph import CallGraph
from generator.report.stack.disassembly import parse_disassembly, run_objdump
from generator.report.stack.elfimage import ElfImage
from generator.report.stack.su import read_su_files

MAX_NAMED = 4  # functions a reason names before "and N more"


def _strongly_connected(graph: CallGraph, reachable: set[int]) -> list[list[int]]:
    """Cycles among the reachable functions (Tarjan's algorithm, iterative)."""
    index_of: dict[int, int] = {}
    low: dict[int, int] = {}
    stack: list[int] = []
    on_stack: set[int] = set()
    cycles: list[list[int]] = []
    counter = 0
    for root in sorted(reachable):
        if root in index_of:
            continue
        work: list[tuple[int, Iterator[int]]] = [(root, iter(_edges(graph, root)))]
        index_of[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index_of[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1 or node in _edges(graph, node):
                        cycles.append(component)
            elif child not in index_of:
                index_of[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(_edges(graph, child))))
            elif child in on_stack:
                low[node] = min(low[node], index_of[child])
    return cycles


def _edges(graph: CallGraph, index: int) -> set[int]:
    node = graph.nodes[index]
    return node.callees | node.millicode


def _reachable(graph: CallGraph, starts: Iterable[int]) -> set[int]:
    seen: set[int] = set()
    todo = list(starts)
    while todo:
        index = todo.pop()
        if index not in seen:
            seen.add(index)
            todo.extend(_edges(graph, index))
    return seen


def _path_to(graph: CallGraph, starts: list[int], goal: int) -> list[str]:
    """A call chain from a start to `goal` (names), breadth first."""
    parent: dict[int, int | None] = {s: None for s in starts}
    todo = list(starts)
    while todo:
        index = todo.pop(0)
        if index == goal:
            chain = []
            at: int | None = index
            while at is not None:
                chain.append(graph.functions[at].name)
                at = parent[at]
            return chain[::-1]
        for child in sorted(_edges(graph, index)):
            if child not in parent:
                parent[child] = index
                todo.append(child)
    return []


def _deepest(graph: CallGraph, index: int, memo: dict[int, tuple[int, list[int]]]
             ) -> tuple[int, list[int]]:
    """(bytes, chain of indices) of the deepest path from `index` (an acyclic part)."""
    if index in memo:
        return memo[index]
    node = graph.nodes[index]
    own = node.frame.bytes + sum(graph.nodes[m].frame.bytes for m in node.millicode)
    best: tuple[int, list[int]] = (node.below_sp, [])
    for callee in sorted(node.callees):  # the first of equals, a callee before the red zone
        depth, chain = _deepest(graph, callee, memo)
        if depth > best[0] or (depth == best[0] and not best[1]):
            best = (depth, chain)
    memo[index] = (own + best[0], [index, *best[1]])
    return memo[index]


def _named(items: list[str]) -> str:
    """Up to MAX_NAMED items, then how many more."""
    shown = "; ".join(items[:MAX_NAMED])
    return shown + (f"; and {len(items) - MAX_NAMED} more" if len(items) > MAX_NAMED else "")


def _indices(graph: CallGraph, names: list[str], what: str, elf: Path) -> list[int]:
    found = []
    for name in names:
        indices = graph.indices_named(name)
        if not indices:
            raise InputError(f"{elf} has no function '{name}' (a stack bound {what})")
        found += indices
    return found


def stack_bound(elf: Path, objdump: str, su_files: list[Path], roots: list[str],
                handlers: list[str], exception_frame_bytes: int,
                reserved_bytes: int | None) -> StackBound:
    """The deepest the stack can go from `roots`, with one of `handlers` (and the exception
    frame the core pushes for it) on top of the deepest point; None when unbounded."""
    if not roots:
        raise InputError("a stack bound needs at least one root function")
    image = ElfImage(elf)
    functions = parse_disassembly(run_objdump(elf, objdump), image.arch)
    graph = CallGraph(functions, image.arch, read_su_files(su_files), image)
    root_indices = _indices(graph, roots, "root", elf)
    handler_indices = _indices(graph, handlers, "handler", elf)
    starts = root_indices + handler_indices
    reachable = _reachable(graph, starts)
    problems = [p for i in sorted(reachable) for p in graph.nodes[i].problems]
    cycles = _strongly_connected(graph, reachable)
    if problems or cycles:
        return _unbounded(graph, starts, reachable, problems, cycles, reserved_bytes)
    memo: dict[int, tuple[int, list[int]]] = {}
    root_depth, root_chain = max((_deepest(graph, i, memo) for i in root_indices),
                                 key=lambda found: found[0])
    handler_depth, handler_chain = max((_deepest(graph, i, memo) for i in handler_indices),
                                       key=lambda found: found[0], default=(0, []))
    if handler_chain:
        handler_depth += exception_frame_bytes
    path = [graph.functions[i].name for i in root_chain + handler_chain]
    reason = _bounded_reason(graph, reachable, root_depth, root_chain, handler_depth,
                             handler_chain, exception_frame_bytes, len(handler_indices))
    return StackBound(root_depth + handler_depth, reserved_bytes, path, reason)


def _unbounded(graph: CallGraph, starts: list[int], reachable: set[int], problems: list[str],
               cycles: list[list[int]], reserved_bytes: int | None) -> StackBound:
    """No bound: the reason names what keeps it from one, the path leads to the first."""
    items = [_recursion(graph, cycle) for cycle in cycles] + problems
    first = next((i for i in sorted(reachable) if graph.nodes[i].problems), None)
    if first is None and cycles:
        first = cycles[0][0]
    path = _path_to(graph, starts, first) if first is not None else []
    return StackBound(None, reserved_bytes, path, "unbounded: " + _named(items))


def _recursion(graph: CallGraph, cycle: list[int]) -> str:
    names = sorted(graph.functions[i].name for i in cycle)
    return f"recursion: {names[0]} calls itself" if len(names) == 1 else \
        f"recursion among {', '.join(names)}"


def _bounded_reason(graph: CallGraph, reachable: set[int], root_depth: int,
                    root_chain: list[int], handler_depth: int, handler_chain: list[int],
                    exception_frame_bytes: int, handler_count: int) -> str:
    """What the bound is made of, and what it assumes."""
    names = graph.functions
    parts = [f"{root_depth} B from {names[root_chain[0]].name} down its deepest path"]
    if handler_chain:
        parts.append(f"+ {handler_depth} B for {names[handler_chain[0]].name} (the deepest of "
                     f"{handler_count} handlers, with a {exception_frame_bytes} B exception "
                     "frame) on top: handlers assumed not to nest (equal priorities)")
    from_su = sum(graph.nodes[i].frame.source == "su" for i in reachable)
    parts.append(f"frames of {from_su} functions from -fstack-usage, "
                 f"{len(reachable) - from_su} from their prologues")
    resolved = list(dict.fromkeys(r for i in sorted(reachable) for r in graph.nodes[i].resolved))
    if resolved:
        parts.append("indirect calls resolved: " + _named(resolved))
    if any(graph.nodes[i].below_sp for i in reachable):
        parts.append("with what leaf functions use of the red zone below sp")
    parts.append("tail calls counted as calls")
    return "; ".join(parts)
