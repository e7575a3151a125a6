"""The call graph: each function with its frame, its callees and what keeps it from being
bounded."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from generator.report.stack.disassembly import (
    TRANSFERS,
    Function,
    Transfer,
    arm_base,
    ends_flow,
    is_padding,
)
from generator.report.stack.elfimage import TABLE_ANCHORS, ElfImage
from generator.report.stack.frames import PROLOGUES, RED_ZONE, RISCV_NUMBER, Frame, arm_writes
from generator.report.stack.su import SuFrame, su_frame_of


@dataclass
class Node:
    """A function with its frame, what it calls and what keeps it from being bounded."""

    function: Function
    frame: Frame
    callees: set[int] = field(default_factory=set)  # indices of functions
    millicode: set[int] = field(default_factory=set)  # callees whose frame stays (RISC-V)
    problems: list[str] = field(default_factory=list)
    resolved: list[str] = field(default_factory=list)  # indirect calls resolved, and how
    below_sp: int = 0  # bytes used below sp without moving it (x86-64's red zone)


class CallGraph:
    """Functions of one firmware, each with its frame and callees."""

    def __init__(self, functions: list[Function], arch: str, su: dict[str, SuFrame],
                 image: ElfImage) -> None:
        self.functions = functions
        self.arch = arch
        self.image = image
        self.tables = image.pointer_tables()
        self.table_names: dict[int, str] = {}
        for name, address in sorted(image.symbols.items()):
            if address in self.tables and name in TABLE_ANCHORS:
                known = self.table_names.get(address)
                self.table_names[address] = f"{known}/{name}" if known else name
        self.starts = [f.start for f in functions]
        self.nodes = [self._node(f, su_frame_of(f.name, su)) for f in functions]
        for index, node in enumerate(self.nodes):
            self._link(index, node, has_su=su_frame_of(node.function.name, su) is not None)

    def index_at(self, address: int) -> int | None:
        """The function holding `address` (None: no symbol there)."""
        low, high = 0, len(self.starts)
        while low < high:
            mid = (low + high) // 2
            if self.starts[mid] <= address:
                low = mid + 1
            else:
                high = mid
        index = low - 1
        if index >= 0 and self.functions[index].contains(address):
            return index
        return None

    def indices_named(self, name: str) -> list[int]:
        """The functions of that name (or whose start another symbol of that name marks)."""
        found = [i for i, f in enumerate(self.functions) if f.name == name]
        address = self.image.symbols.get(name)
        if not found and address is not None:
            index = self.index_at(self.image.code_address(address))
            if index is not None and self.functions[index].start == \
                    self.image.code_address(address):
                found.append(index)
        return found

    def _node(self, function: Function, su: SuFrame | None) -> Node:
        """The function's frame: its .su line, else its prologue (a PLT stub: unknown)."""
        if _is_plt(function):
            node = Node(function, Frame(0))
            node.problems.append(f"{_plt_name(function)} is a shared library's (its stack is "
                                 "not in this file)")
            return node
        if su is not None:
            dynamic = "" if su.bounded else f"{function.name} has a dynamic frame " \
                                            "(-fstack-usage: alloca or a variable-length array)"
            node = Node(function, Frame(su.bytes, dynamic, "su"))
        else:
            node = Node(function, PROLOGUES[self.arch](function))
        node.below_sp = red_zone_use(function) if self.arch in RED_ZONE else 0
        return node

    def _link(self, index: int, node: Node, has_su: bool) -> None:
        """The node's callees and problems, from its instructions."""
        function = node.function
        if node.frame.dynamic:
            node.problems.append(node.frame.dynamic)
        if _is_plt(function):
            return
        join_points = self._join_points(function)
        for position, ins in enumerate(function.instructions):
            transfer = TRANSFERS[self.arch](ins)
            if transfer is None or transfer.kind in ("return", "switch"):
                continue
            if transfer.kind in ("call", "jump"):
                self._direct(index, node, transfer)
            else:
                self._indirect(node, position, transfer, join_points)
        if not has_su:
            self._fall_through(index, node)

    def _direct(self, index: int, node: Node, transfer: Transfer) -> None:
        if transfer.target is None:
            node.problems.append(f"{node.function.name} branches where objdump names no address")
            return
        callee = self.index_at(transfer.target)
        if callee is None:
            node.problems.append(f"{node.function.name} calls {transfer.target:#x}, which has "
                                 "no symbol")
        elif callee != index or (transfer.kind == "call" and
                                 transfer.target == node.function.start):
            # (a `bl` inside its own function is Thumb-1's long branch, not a call)
            (node.millicode if transfer.millicode else node.callees).add(callee)

    def _join_points(self, function: Function) -> set[int]:
        """Addresses inside the function that branches reach."""
        points = set()
        for ins in function.instructions:
            transfer = TRANSFERS[self.arch](ins)
            if transfer is not None and transfer.kind == "jump" and transfer.target is not None \
                    and function.contains(transfer.target):
                points.add(transfer.target)
        return points

    def _indirect(self, node: Node, position: int, transfer: Transfer,
                  join_points: set[int]) -> None:
        """An indirect call or jump: a switch, a known target, a table's entries, or a
        problem."""
        function = node.function
        if transfer.kind == "indirect-jump" and self._is_switch(function, position, transfer):
            return
        ins = function.instructions[position]
        site = f"{ins.mnemonic} {ins.operands}".strip()
        if ins.target is not None and "(%rip)" in transfer.register:
            section = self.image.section_at(ins.target)
            if section is not None and section.name.startswith(".got"):
                name = ins.target_name.split("@")[0] or f"{ins.target:#x}"
                node.problems.append(f"{function.name} calls {name}, a shared library's "
                                     "(through the GOT)")
                return
        if self.arch == "arm":
            value = _arm_literal_value(function, position, transfer.register, join_points)
            if value == 0:
                node.resolved.append(f"{function.name}'s {site} (a weak function not linked: "
                                     "never called)")
                return
            if value is not None and (callee := self.index_at(self.image.code_address(value))) \
                    is not None:
                node.callees.add(callee)
                return
        read = sorted(a for a in _referenced(function) if a in self.tables)
        if read:
            for address in read:
                node.callees.update(c for t in self.tables[address]
                                    if (c := self.index_at(t)) is not None)
            names = ", ".join(self.table_names.get(a, f"{a:#x}") for a in read)
            node.resolved.append(f"{function.name}'s {site} through {names}")
            return
        kind = "indirect call" if transfer.kind == "indirect-call" else "indirect jump"
        node.problems.append(f"{function.name} makes an {kind} ({site})")

    def _is_switch(self, function: Function, position: int, transfer: Transfer) -> bool:
        """An indirect jump through a table of places in the same function (a switch)."""
        before = function.instructions[max(0, position - 4):position]
        register = transfer.register
        if self.arch == "x86_64":
            added = any(i.mnemonic == "add" and i.operands.endswith("," + register)
                        for i in before)
            loaded = any(i.mnemonic.startswith("movs") and i.operands.endswith(register)
                         and ",4)" in i.operands for i in before)
            if added and loaded:
                return True
            table = re.match(r"^\*(0x[0-9a-f]+)\(,%r\w+,8\)$", "*" + register)
            return bool(table) and self._table_points_into(function, int(table[1], 16))
        if self.arch == "riscv":
            added = any(i.mnemonic == "add" and i.operands.startswith(f"{register},{register},")
                        and not RISCV_NUMBER.match(i.operands.rsplit(",", 1)[1]) for i in before)
            loaded = any(i.mnemonic in ("lw", "ld") and i.operands.startswith(register + ",")
                         for i in before)
            if added and loaded:
                return True
            wider = function.instructions[max(0, position - 8):position]
            return any(i.target is not None and self._table_points_into(function, i.target)
                       for i in wider)
        # Thumb-1: `ldr rX, [table, index]; mov pc, rX`, the table's address in the pool
        loaded = any(arm_base(i.mnemonic)[0] == "ldr" and
                     re.match(rf"^{register}, \[\w+, \w+\]$", i.operands) for i in before)
        return loaded and any(self._table_points_into(function, w)
                              for w in function.words.values())

    def _table_points_into(self, function: Function, address: int) -> bool:
        """Whether the word at `address` is a place in `function` (a jump table's entry)."""
        value = self.image.word(address)
        if value is None:
            return False
        place = self.image.code_address(value)
        return function.contains(place) and place != function.start

    def _fall_through(self, index: int, node: Node) -> None:
        """Assembly that runs off its end into the next symbol calls it, in effect."""
        code = [i for i in node.function.instructions if not is_padding(i)]
        if not code or index + 1 >= len(self.functions):
            return
        last = code[-1]
        transfer = TRANSFERS[self.arch](last)
        following = self.functions[index + 1]
        if ends_flow(last, self.arch) or (transfer is not None and transfer.kind in (
                "call", "indirect-call")) or following.start != node.function.end:
            return
        node.callees.add(index + 1)


def _is_plt(function: Function) -> bool:
    """A stub of the procedure linkage table: the way into a shared library."""
    return function.section.startswith(".plt") or "@plt" in function.name


def _plt_name(function: Function) -> str:
    return re.sub(r"@plt.*$", "", function.name) or function.name


def red_zone_use(function: Function) -> int:
    """x86-64: how far below %rsp the code reaches without moving it (the lowest `-N(%rsp)`
    it names; the ABI's red zone is 128 bytes, and an array there is indexed upwards)."""
    offsets = [int(m[1], 16) for i in function.instructions
               for m in re.finditer(r"-0x([0-9a-f]+)\(%rsp", i.operands)]
    return min(RED_ZONE["x86_64"], max(offsets, default=0))


def _referenced(function: Function) -> set[int]:
    """Addresses the function's code names: literal pool words, objdump's `# addr` notes."""
    return {i.target for i in function.instructions if i.target is not None} | \
        set(function.words.values())


def _arm_literal_value(function: Function, position: int, register: str,
                       join_points: set[int]) -> int | None:
    """The literal pool word the register holds at `position`, when one straight-line
    `ldr rX, [pc, #N]` put it there, or `ldr pc, [pc, #N]` jumps to (None: not known)."""
    here = function.instructions[position]
    if register == "pc":
        return function.words.get(here.target) if here.target is not None else None
    for k in range(position - 1, -1, -1):
        if function.instructions[k + 1].address in join_points:
            return None
        ins = function.instructions[k]
        if arm_writes(ins, register):
            base, _ = arm_base(ins.mnemonic)
            if base == "ldr" and ins.target in function.words:
                return function.words[ins.target]
            return None
    return None
