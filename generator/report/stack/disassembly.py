"""The disassembly (`objdump -d`) as functions of instructions, and what one instruction does
to control flow."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from generator.errors import InputError

OBJDUMP_TIMEOUT = 120


@dataclass(frozen=True)
class Instruction:
    address: int
    mnemonic: str  # without prefixes: "push", "bl", "jalr", "call"
    operands: str  # as objdump wrote them, comment removed
    target: int | None = None  # the address objdump's comment names (`# 3db8 <sym>`)
    target_name: str = ""  # and the symbol it names there ("write@GLIBC_2.2.5")
    prefixes: tuple[str, ...] = ()  # x86: "notrack", "bnd", "rep"...


@dataclass
class Function:
    """The code between one symbol and the next, as objdump shows it."""

    name: str
    start: int
    end: int = 0
    instructions: list[Instruction] = field(default_factory=list)
    words: dict[int, int] = field(default_factory=dict)  # literal pool: address -> value
    section: str = ""

    def contains(self, address: int) -> bool:
        return self.start <= address < self.end


LABEL = re.compile(r"^([0-9a-f]+) <(.+)>:$")
SECTION = re.compile(r"^Disassembly of section (\S+):$")
LINE = re.compile(r"^\s*([0-9a-f]+):\t(.*)$")
COMMENT_TARGET = re.compile(r"^\(?([0-9a-f]+) <([^>]*)>\)?")
X86_PREFIXES = {"notrack", "bnd", "rep", "repz", "repe", "repnz", "repne", "lock", "data16",
                "cs", "ds", "es", "ss", "fs", "gs", "addr32"}


def run_objdump(elf: Path, objdump: str) -> str:
    """`objdump -d` of the ELF (InputError when the tool or the file is not usable)."""
    tool = shutil.which(objdump)
    if tool is None:
        raise InputError(f"{objdump} is not on PATH (the stack bound needs the toolchain's "
                         "objdump)")
    try:
        done = subprocess.run([tool, "-d", "-w", "--no-show-raw-insn", str(elf)],
                              capture_output=True, text=True, timeout=OBJDUMP_TIMEOUT,
                              errors="replace")
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InputError(f"{objdump} could not disassemble {elf}: {exc}") from exc
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise InputError(f"{objdump} could not disassemble {elf}: {last}")
    return done.stdout


def parse_disassembly(text: str, arch: str) -> list[Function]:
    """Functions, in address order, from `objdump -d -w --no-show-raw-insn` text."""
    functions: list[Function] = []
    section = ""
    for line in text.splitlines():
        if (match := SECTION.match(line)) is not None:
            section = match[1]
        elif (match := LABEL.match(line)) is not None:
            functions.append(Function(match[2], int(match[1], 16), section=section))
        elif (match := LINE.match(line)) is not None and functions:
            _add_line(functions[-1], int(match[1], 16), match[2], arch)
    functions.sort(key=lambda f: f.start)
    for here, following in zip(functions, functions[1:] + [None], strict=True):
        last = max([here.start, *(i.address + 1 for i in here.instructions),
                    *(a + 4 for a in here.words)])
        here.end = following.start if following is not None and \
            following.section == here.section else last
    return functions


def _add_line(function: Function, address: int, text: str, arch: str) -> None:
    """One line of code (or literal pool data) into its function."""
    comment_mark = "@" if arch == "arm" else "#"
    code, _, comment = text.partition(comment_mark)
    parts = code.split(None, 1)
    if not parts:
        return
    prefixes: list[str] = []
    while arch == "x86_64" and parts[0] in X86_PREFIXES and len(parts) > 1:
        prefixes.append(parts[0])
        parts = parts[1].split(None, 1)
    mnemonic, operands = parts[0], (parts[1].strip() if len(parts) > 1 else "")
    if mnemonic == ".word":
        function.words[address] = int(operands.split()[0], 0)
        return
    if mnemonic.startswith(".") or mnemonic == "...":
        return
    target = COMMENT_TARGET.match(comment.strip())
    function.instructions.append(Instruction(
        address, mnemonic, operands, int(target[1], 16) if target else None,
        target[2] if target else "", tuple(prefixes)))


# ---- what one instruction does to control flow --------------------------------------------

@dataclass(frozen=True)
class Transfer:
    """An instruction that leaves the straight line."""

    kind: str  # "call" | "jump" | "return" | "indirect-call" | "indirect-jump" | "switch"
    target: int | None = None  # direct call or jump
    register: str = ""  # indirect: the register holding the target
    conditional: bool = False
    millicode: bool = False  # RISC-V `jal t0, __riscv_save_N`: the frame is the caller's


HEX_TARGET = re.compile(r"^([0-9a-f]+)(?: <[^>]*>)?$")
ARM_CONDITIONS = ("eq", "ne", "cs", "hs", "cc", "lo", "mi", "pl", "vs", "vc", "hi", "ls",
                  "ge", "lt", "gt", "le", "al")


def _hex_target(text: str) -> int | None:
    match = HEX_TARGET.match(text.strip())
    return int(match[1], 16) if match else None


def arm_base(mnemonic: str) -> tuple[str, bool]:
    """An ARM mnemonic without its width suffix and condition: ("b", True) for "bne.n"."""
    base = mnemonic.removesuffix(".n").removesuffix(".w")
    for stem in ("blx", "bl", "bx", "b", "pop", "ldr", "mov"):
        if base.startswith(stem) and base[len(stem):] in ARM_CONDITIONS:
            return stem, base[len(stem):] not in ("", "al")
    return base, False


def register_list(text: str) -> list[str]:
    """`{r4, r5-r7, lr}` -> ["r4", "r5", "r6", "r7", "lr"]."""
    inside = text[text.find("{") + 1:text.find("}")] if "{" in text else ""
    names: list[str] = []
    for item in filter(None, (part.strip() for part in inside.split(","))):
        low, _, high = item.partition("-")
        if high and low[:1] == high[:1] and low[1:].isdigit() and high[1:].isdigit():
            names += [f"{low[0]}{n}" for n in range(int(low[1:]), int(high[1:]) + 1)]
        else:
            names.append(item)
    return names


def arm_transfer(ins: Instruction) -> Transfer | None:
    """Thumb-2: calls, branches, returns, table branches."""
    base, conditional = arm_base(ins.mnemonic)
    ops = ins.operands
    if base in ("bl", "blx"):
        target = _hex_target(ops)
        return Transfer("call", target) if target is not None else \
            Transfer("indirect-call", register=ops.strip(), conditional=conditional)
    if base == "bx":
        return Transfer("return" if ops.strip() == "lr" else "indirect-jump",
                        register=ops.strip(), conditional=conditional)
    if base == "b":
        return Transfer("jump", _hex_target(ops), conditional=conditional)
    if base in ("cbz", "cbnz"):
        return Transfer("jump", _hex_target(ops.split(",", 1)[1]), conditional=True)
    if base in ("tbb", "tbh"):
        return Transfer("switch")
    if base in ("pop", "ldmia", "ldm", "ldmfd") and "pc" in register_list(ops):
        return Transfer("return", conditional=conditional)
    first = ops.split(",", 1)[0].strip()
    if first == "pc" and base in ("ldr", "mov", "add"):
        if base == "ldr" and "[sp]" in ops:
            return Transfer("return", conditional=conditional)
        if base == "add" or (base == "ldr" and re.search(r"\[pc, r", ops)):
            return Transfer("switch")
        if base == "ldr" and "[pc" in ops:  # a veneer: `ldr pc, [pc, #N]`, the target pooled
            return Transfer("indirect-jump", register="pc", conditional=conditional)
        register = ops.split(",", 1)[1].strip()
        return Transfer("return" if register == "lr" else "indirect-jump", register=register,
                        conditional=conditional)
    return None


RISCV_BRANCHES = {"beq", "bne", "blt", "bge", "bltu", "bgeu", "beqz", "bnez", "blez", "bgez",
                  "bltz", "bgtz", "bgt", "ble", "bgtu", "bleu"}


def riscv_transfer(ins: Instruction) -> Transfer | None:
    """RISC-V: jal/j/call/tail, jalr/jr/ret, conditional branches."""
    m, ops = ins.mnemonic, [op.strip() for op in ins.operands.split(",")]
    if m in ("jal", "call", "tail", "j"):
        link = ops[0] if len(ops) > 1 else ("zero" if m in ("j", "tail") else "ra")
        target = _hex_target(ops[-1])
        if link == "zero":
            return Transfer("jump", target)
        return Transfer("call", target, millicode=link != "ra")
    if m in ("jalr", "jr"):
        link = ops[0] if m == "jalr" and len(ops) > 1 else ("ra" if m == "jalr" else "zero")
        register = re.sub(r"^-?\d*\(|\)$", "", ops[-1])
        if ins.target is not None:  # auipc + jalr: objdump names the target
            return Transfer("call" if link != "zero" else "jump", ins.target)
        if link == "zero":
            return Transfer("return" if register == "ra" else "indirect-jump",
                            register=register)
        return Transfer("indirect-call", register=register)
    if m == "ret":
        return Transfer("return")
    if m in RISCV_BRANCHES:
        return Transfer("jump", _hex_target(ops[-1]), conditional=True)
    return None


X86_CONDITIONAL_JUMPS = re.compile(r"^(j(?!mp)[a-z]+|loop[a-z]*)$")


def x86_transfer(ins: Instruction) -> Transfer | None:
    """x86-64: call, jmp, jcc, ret."""
    m, ops = ins.mnemonic.removesuffix("q"), ins.operands
    if m in ("call", "jmp"):
        if not ops.startswith("*"):
            return Transfer("call" if m == "call" else "jump", _hex_target(ops))
        if "notrack" in ins.prefixes:  # GCC's -fcf-protection marks its jump tables
            return Transfer("switch")
        return Transfer("indirect-call" if m == "call" else "indirect-jump",
                        register=ops.removeprefix("*"))
    if m in ("ret", "retn"):
        return Transfer("return")
    if X86_CONDITIONAL_JUMPS.match(ins.mnemonic):
        return Transfer("jump", _hex_target(ops), conditional=True)
    return None


TRANSFERS = {"arm": arm_transfer, "riscv": riscv_transfer, "x86_64": x86_transfer}


def ends_flow(ins: Instruction, arch: str) -> bool:
    """Control never goes on to the next instruction (for the fall-through edge)."""
    transfer = TRANSFERS[arch](ins)
    if transfer is not None:
        return transfer.kind in ("jump", "return", "indirect-jump", "switch") \
            and not transfer.conditional
    return ins.mnemonic in ("udf", "ud2", "hlt", "unimp", "mret")


def is_padding(ins: Instruction) -> bool:
    """Alignment filler after a function's last instruction."""
    return ins.mnemonic.startswith("nop") or ins.mnemonic in ("int3", "c.nop") or \
        (ins.mnemonic == "xchg" and ins.operands == "%ax,%ax")
