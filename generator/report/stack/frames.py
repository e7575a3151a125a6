"""Frames from prologues: what a function's code takes off sp (for the functions that have no
-fstack-usage line)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from generator.report.stack.disassembly import Function, Instruction, arm_base, register_list


@dataclass(frozen=True)
class Frame:
    bytes: int
    dynamic: str = ""  # why the frame has no fixed size ("" when it has)
    source: str = "prologue"  # "su" | "prologue"


def _run_time_frame(function: Function, ins: Instruction, so_far: int) -> Frame:
    """A frame sp moves by an amount known only at run time (alloca, a variable-length array)
    or that switches to another stack."""
    return Frame(so_far, f"{function.name} moves sp at run time ({ins.mnemonic} "
                         f"{ins.operands})")


ARM_IMMEDIATE = re.compile(r"#(-?(?:0x[0-9a-f]+|\d+))$")
ARM_REGISTER_BYTES = {"d": 8, "s": 4, "q": 16}


def _arm_immediate(text: str) -> int | None:
    match = ARM_IMMEDIATE.search(text.strip())
    return int(match[1], 0) if match else None


def arm_frame(function: Function) -> Frame:
    """Thumb-2: bytes the function's code takes off sp (a register amount: dynamic)."""
    total, constants = 0, {}
    for ins in function.instructions:
        base, _ = arm_base(ins.mnemonic)
        ops = [op.strip() for op in ins.operands.split(",")]
        if base in ("push", "stmdb", "stmfd") and (base == "push" or ops[0] == "sp!"):
            total += 4 * len(register_list(ins.operands))
        elif base in ("vpush", "vstmdb") and (base == "vpush" or ops[0] == "sp!"):
            total += sum(ARM_REGISTER_BYTES.get(r[0], 8) for r in register_list(ins.operands))
        elif base.startswith("str") and re.search(r"\[sp, #-\d+\]!", ins.operands):
            total += int(re.search(r"#-(\d+)\]!", ins.operands)[1])
        elif ops[0] == "sp" and base in ("sub", "subw", "add", "addw"):
            amount = _arm_sp_amount(ops, constants)
            if amount is None:
                return _run_time_frame(function, ins, total)
            total += amount if base.startswith("sub") else max(0, -amount)
        elif ops[0] == "sp" and base in ("mov", "ldr") and \
                ops[-1] not in ("r7", "fp", "r11"):
            return _run_time_frame(function, ins, total)
        elif base == "msr" and ops[0] in ("msp", "psp"):
            return _run_time_frame(function, ins, total)
        _track_arm_constant(ins, base, ops, function.words, constants)
    return Frame(total)


def _arm_sp_amount(ops: list[str], constants: dict[str, int]) -> int | None:
    """The amount of `sub sp, #N`, `sub.w sp, sp, #N` or `sub sp, rX` with rX known."""
    last = ops[-1]
    if last.startswith("#"):
        return _arm_immediate(last)
    value = constants.get(last)
    return value - (1 << 32) if value is not None and value >= 1 << 31 else value


def _track_arm_constant(ins: Instruction, base: str, ops: list[str], words: dict[int, int],
                        constants: dict[str, int]) -> None:
    """Registers holding a known constant (movw/movt/mov #N/ldr from the literal pool)."""
    register = ops[0]
    if base in ("movw", "mov", "movs") and len(ops) == 2 and ops[1].startswith("#"):
        constants[register] = _arm_immediate(ops[1]) or 0
    elif base == "movt" and register in constants:
        constants[register] = (constants[register] & 0xFFFF) | ((_arm_immediate(ops[1]) or 0)
                                                                << 16)
    elif base == "ldr" and ins.target in words:
        constants[register] = words[ins.target]
    elif arm_writes(ins, register):
        constants.pop(register, None)


ARM_NOT_WRITING = ("str", "cmp", "cmn", "tst", "teq", "cb", "it", "push", "stm", "vst",
                   "vpush", "nop", "msr", "dmb", "dsb", "isb", "bkpt", "svc", "cps", "wf",
                   "tbb", "tbh", "pld")


def arm_writes(ins: Instruction, register: str) -> bool:
    """Whether a Thumb-2 instruction may change `register`."""
    base, _ = arm_base(ins.mnemonic)
    if base in ("bl", "blx"):
        return register in ("r0", "r1", "r2", "r3", "ip", "r12", "lr")
    if base.startswith(("pop", "ldm")):
        return register in register_list(ins.operands)
    if base in ("b", "bx") or (base.startswith(ARM_NOT_WRITING) and not base.startswith("strex")):
        return False
    operands = ins.operands.split(",")
    return operands[0].strip() == register or (base.startswith("ldrd") and len(operands) > 1
                                               and operands[1].strip() == register)


RISCV_NUMBER = re.compile(r"^-?(?:0x[0-9a-f]+|\d+)$")


def riscv_frame(function: Function) -> Frame:
    """RISC-V: bytes `addi sp,sp,-N` (or `add sp,sp,tX` with tX known) take off sp."""
    total, constants = 0, {}
    for ins in function.instructions:
        ops = [op.strip() for op in ins.operands.split(",")]
        if ops[0] == "sp" and ins.mnemonic not in ("sw", "sd", "sh", "sb", "c.sw", "c.swsp"):
            if ins.mnemonic in ("add", "addi", "c.addi", "c.addi16sp", "sub") and \
                    len(ops) == 3 and ops[1] == "sp" and ins.target is None:
                amount = int(ops[2], 0) if RISCV_NUMBER.match(ops[2]) else constants.get(ops[2])
                if amount is None:
                    return _run_time_frame(function, ins, total)
                total += max(0, amount if ins.mnemonic == "sub" else -amount)
            elif not (len(ops) > 1 and ops[1] in ("s0", "fp")):  # `mv sp,s0`: restores
                return _run_time_frame(function, ins, total)
        _track_riscv_constant(ins, ops, constants)
    return Frame(total)


def _track_riscv_constant(ins: Instruction, ops: list[str], constants: dict[str, int]) -> None:
    """Registers holding a known constant (li, lui, addi of a known one)."""
    if not ops or not ops[0]:
        return
    register = ops[0]
    if ins.mnemonic == "li" and RISCV_NUMBER.match(ops[-1]):
        constants[register] = int(ops[-1], 0)
    elif ins.mnemonic == "lui" and RISCV_NUMBER.match(ops[-1]):
        value = (int(ops[-1], 0) << 12) & 0xFFFFFFFF
        constants[register] = value - (1 << 32) if value & 0x80000000 else value
    elif ins.mnemonic in ("add", "addi") and len(ops) == 3 and ops[1] == register \
            and register in constants and RISCV_NUMBER.match(ops[2]):
        constants[register] += int(ops[2], 0)
    else:
        constants.pop(register, None)


X86_RETURN_ADDRESS = 8
# The x86-64 System V ABI lets a function use 128 bytes below %rsp without moving it (GCC does,
# in leaf functions); -fstack-usage does not count them.
RED_ZONE = {"x86_64": 128}


def x86_frame(function: Function) -> Frame:
    """x86-64: the return address, `push`es and `sub $N,%rsp` of the function."""
    total = X86_RETURN_ADDRESS
    for ins in function.instructions:
        m, ops = ins.mnemonic, ins.operands
        if m in ("push", "pushq"):
            total += 8
        elif m == "enter":
            total += 8 + int(ops.split(",")[0].lstrip("$"), 0)
        elif not ops.endswith("%rsp") or m.startswith(("cmp", "test", "push", "pop")):
            continue
        elif m in ("sub", "add") and ops.startswith("$"):
            amount = _signed64(int(ops.split(",")[0].lstrip("$"), 0))
            total += max(0, amount if m == "sub" else -amount)
        elif m == "lea" and re.match(r"^-?(0x[0-9a-f]+)?\(%rsp\),%rsp$", ops):
            total += max(0, -int(ops.split("(")[0] or "0", 0))
        elif m == "and" and ops.startswith("$"):
            total += 8  # realignment: at most 8 more bytes (sp is 8-aligned already)
        elif not re.match(r"^(mov %rbp|lea -?(0x[0-9a-f]+)?\(%rbp\)),%rsp$", f"{m} {ops}"):
            return _run_time_frame(function, ins, total)
    return Frame(total)


def _signed64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


PROLOGUES = {"arm": arm_frame, "riscv": riscv_frame, "x86_64": x86_frame}
