"""The stack bound of a firmware: the deepest the stack can go (`microtvm-gen report`).

The call graph comes from the disassembly (`objdump -d`): direct calls, tail calls (a branch
into another function) and falling off the end of an assembly function into the next one.
A function's frame is what GCC's -fstack-usage wrote for it (the project's own objects), else
what its prologue reserves (the C library, libgcc, assembly, objects compiled without the
flag): Thumb-2 `push`/`stmdb sp!`/`vpush`/`sub sp`, RISC-V `addi sp,sp,-N`, x86-64 `push` and
`sub $N,%rsp` plus the return address of the call. The bound is the deepest path from the
roots, plus the deepest interrupt handler (with the exception frame the core pushes) on top.

Unbounded (`bound_bytes` None, the reason names the functions): recursion, indirect calls it
cannot resolve, frames that grow at run time (alloca, variable-length arrays, a stack switch),
calls into code without a symbol or into a shared library. Indirect calls it resolves, and
says so: a target loaded from a literal pool (a weak function that was not linked, address 0,
is never called), and the calls of a function that reads one of the function-pointer tables
the firmware declares (the constructor and destructor tables, the model's accelerator
counter table): those may call any entry of the table.

An indirect jump through a switch's table of places in its own function is not a call. On
x86-64 a function may also use the 128-byte red zone below %rsp without moving it: the lowest
`-N(%rsp)` a function names counts below its frame.

It over-estimates where it cannot see better: a tail call counts as a call (the caller's
frame stays counted), a prologue-analysed function's frame is every decrement of sp in it.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

# The ELF reader's helpers: the section headers with their file offsets (to read tables).
from generator.elfsize import ElfSection, _read_elf, _sections, elf_sections, elf_symbols
from generator.errors import InputError
from generator.report.model import StackBound

OBJDUMP_TIMEOUT = 120
EM_ARM, EM_X86_64, EM_RISCV = 40, 62, 243
ARCH_OF_MACHINE = {EM_ARM: "arm", EM_X86_64: "x86_64", EM_RISCV: "riscv"}
SHT_NOBITS, SHF_ALLOC = 8, 0x2
MAX_NAMED = 4  # functions a reason names before "and N more"

# Function-pointer tables a firmware declares: (start symbol, end symbol) of the linker's
# constructor and destructor tables. A function that reads a table's start may call any entry.
BOUNDED_TABLES = (("__preinit_array_start", "__preinit_array_end"),
                  ("__init_array_start", "__init_array_end"),
                  ("__fini_array_start", "__fini_array_end"))
# The generated application's accelerator counters: a constant pointer to an array of
# functions (app/model_glue.c) and the array's length.
COUNTED_TABLES = (("mtvg_model_accel_counters", "mtvg_model_num_accel_counters"),)
TABLE_ANCHORS = {anchor for anchor, _ in BOUNDED_TABLES + COUNTED_TABLES}
VECTOR_TABLE = "mtvg_vectors"  # templates/common/platform/cortex_m/startup.c


# ---- -fstack-usage files ------------------------------------------------------------------

@dataclass(frozen=True)
class SuFrame:
    """One function's line of a GCC .su file."""

    bytes: int
    bounded: bool  # "static" or "dynamic,bounded"; False: "dynamic" (alloca, VLA)


SU_LINE = re.compile(r"^(?P<where>.*):\d+:\d+:(?P<name>[^\t]+)\t(?P<bytes>\d+)\t"
                     r"(?P<kind>static|dynamic|dynamic,bounded)\s*$")


def parse_su(text: str) -> dict[str, SuFrame]:
    """Frames by function name from one .su file (a name seen twice keeps the larger)."""
    frames: dict[str, SuFrame] = {}
    for line in text.splitlines():
        match = SU_LINE.match(line)
        if match is None:
            continue
        frame = SuFrame(int(match["bytes"]), match["kind"] != "dynamic")
        frames[match["name"]] = _larger(frames.get(match["name"]), frame)
    return frames


def _larger(old: SuFrame | None, new: SuFrame) -> SuFrame:
    """Two frames of one name (static functions of two files): the worse of the two."""
    if old is None:
        return new
    return SuFrame(max(old.bytes, new.bytes), old.bounded and new.bounded)


def read_su_files(paths: Iterable[Path]) -> dict[str, SuFrame]:
    """Frames by function name from all the .su files (unreadable files are skipped)."""
    frames: dict[str, SuFrame] = {}
    for path in paths:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        for name, frame in parse_su(text).items():
            frames[name] = _larger(frames.get(name), frame)
    return frames


def su_frame_of(name: str, frames: dict[str, SuFrame]) -> SuFrame | None:
    """A function's .su frame; GCC's clones (`f.isra.0`) are written without the number."""
    if name in frames:
        return frames[name]
    return frames.get(re.sub(r"\.\d+$", "", name))


# ---- the disassembly ----------------------------------------------------------------------

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


def _arm_base(mnemonic: str) -> tuple[str, bool]:
    """An ARM mnemonic without its width suffix and condition: ("b", True) for "bne.n"."""
    base = mnemonic.removesuffix(".n").removesuffix(".w")
    for stem in ("blx", "bl", "bx", "b", "pop", "ldr", "mov"):
        if base.startswith(stem) and base[len(stem):] in ARM_CONDITIONS:
            return stem, base[len(stem):] not in ("", "al")
    return base, False


def _register_list(text: str) -> list[str]:
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
    base, conditional = _arm_base(ins.mnemonic)
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
    if base in ("pop", "ldmia", "ldm", "ldmfd") and "pc" in _register_list(ops):
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


# ---- frames from prologues ----------------------------------------------------------------

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
        base, _ = _arm_base(ins.mnemonic)
        ops = [op.strip() for op in ins.operands.split(",")]
        if base in ("push", "stmdb", "stmfd") and (base == "push" or ops[0] == "sp!"):
            total += 4 * len(_register_list(ins.operands))
        elif base in ("vpush", "vstmdb") and (base == "vpush" or ops[0] == "sp!"):
            total += sum(ARM_REGISTER_BYTES.get(r[0], 8) for r in _register_list(ins.operands))
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
    base, _ = _arm_base(ins.mnemonic)
    if base in ("bl", "blx"):
        return register in ("r0", "r1", "r2", "r3", "ip", "r12", "lr")
    if base.startswith(("pop", "ldm")):
        return register in _register_list(ins.operands)
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


# ---- the ELF's data: tables of function pointers, vector table ----------------------------

class ElfImage:
    """An ELF's symbols and the bytes of its loaded sections."""

    def __init__(self, path: Path) -> None:
        try:
            self.blob, self.is64, self.endian = _read_elf(path)
            self.sections = _sections(self.blob, self.is64, self.endian)
            machine, = struct.unpack_from(self.endian + "H", self.blob, 0x12)
            self.named_sections = elf_sections(path)
            symbols = elf_symbols(path)
        except (OSError, ValueError, struct.error) as exc:
            raise InputError(f"cannot read {path} as an ELF file: {exc}") from exc
        self.arch = ARCH_OF_MACHINE.get(machine, "")
        if not self.arch:
            raise InputError(f"{path}: the stack bound knows Arm, RISC-V and x86-64 code, not "
                             f"ELF machine {machine}")
        self.path = path
        self.word_bytes = 8 if self.is64 else 4
        self.symbols: dict[str, int] = {}  # the first symbol of each name
        self.sizes: dict[str, int] = {}
        self.functions_at: dict[int, str] = {}
        for symbol in symbols:
            self.symbols.setdefault(symbol.name, symbol.value)
            self.sizes.setdefault(symbol.name, symbol.size)
            if symbol.kind == "func":
                self.functions_at.setdefault(symbol.value, symbol.name)

    def word(self, address: int) -> int | None:
        """The pointer-sized word the file holds at `address` (None: not in a section)."""
        for sec in self.sections:
            if sec.sh_type != SHT_NOBITS and sec.flags & SHF_ALLOC and sec.addr <= address and \
                    address + self.word_bytes <= sec.addr + sec.size:
                fmt = self.endian + ("Q" if self.is64 else "I")
                return struct.unpack_from(fmt, self.blob, sec.offset + address - sec.addr)[0]
        return None

    def words(self, start: int, count: int) -> list[int]:
        """`count` words from `start` (fewer when the file ends)."""
        out = []
        for i in range(count):
            value = self.word(start + i * self.word_bytes)
            if value is None:
                break
            out.append(value)
        return out

    def code_address(self, value: int) -> int:
        """A function pointer's code address (Thumb: without the low bit)."""
        return value & ~1 if self.arch == "arm" else value

    def pointer_tables(self) -> dict[int, list[int]]:
        """The firmware's function-pointer tables: their address -> the code they point to."""
        tables: dict[int, list[int]] = {}
        for start_name, end_name in BOUNDED_TABLES:
            start, end = self.symbols.get(start_name), self.symbols.get(end_name)
            if start is not None and end is not None and end >= start:
                entries = self.words(start, (end - start) // self.word_bytes)
                tables.setdefault(start, []).extend(self.code_address(v) for v in entries if v)
        for pointer_name, count_name in COUNTED_TABLES:
            anchor, counter = self.symbols.get(pointer_name), self.symbols.get(count_name)
            if anchor is None or counter is None:
                continue
            array, count = self.word(anchor), self.word(counter)
            if array is None or count is None:
                continue
            count &= 0xFFFFFFFF
            entries = self.words(array, count) if array and count else []
            tables.setdefault(anchor, []).extend(self.code_address(v) for v in entries if v)
        return tables

    def section_words(self, name: str) -> list[int]:
        """The words of a named section (empty when there is none)."""
        for sec in self.named_sections:
            if sec.name == name and not sec.nobits:
                return self.words(sec.addr, sec.size // self.word_bytes)
        return []

    def section_at(self, address: int) -> ElfSection | None:
        """The loaded section holding `address`."""
        return next((sec for sec in self.named_sections if sec.allocated and
                     sec.addr <= address < sec.addr + sec.size), None)

    def vector_handlers(self) -> list[str]:
        """Cortex-M: the distinct handlers the vector table names (the templates' startup.c
        `mtvg_vectors`, else the `.vectors` section), but the reset handler (its first word
        is the initial sp, its second the reset handler)."""
        start, size = self.symbols.get(VECTOR_TABLE), self.sizes.get(VECTOR_TABLE, 0)
        words = self.words(start, size // self.word_bytes) if start is not None and size \
            else self.section_words(".vectors")
        table = [self.functions_at.get(self.code_address(v)) if v else None for v in words]
        reset = table[1] if len(table) > 1 else None
        return list(dict.fromkeys(name for name in table[2:] if name and name != reset))


def cortex_m_handlers(elf: Path) -> list[str]:
    """The interrupt and exception handlers a Cortex-M firmware's vector table names."""
    return ElfImage(elf).vector_handlers()


# ---- the call graph -----------------------------------------------------------------------

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
        loaded = any(_arm_base(i.mnemonic)[0] == "ldr" and
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
            base, _ = _arm_base(ins.mnemonic)
            if base == "ldr" and ins.target in function.words:
                return function.words[ins.target]
            return None
    return None


# ---- the bound ----------------------------------------------------------------------------

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
