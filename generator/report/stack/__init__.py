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

from generator.report.stack.bound import stack_bound
from generator.report.stack.disassembly import parse_disassembly, run_objdump
from generator.report.stack.elfimage import ElfImage, cortex_m_handlers
from generator.report.stack.frames import PROLOGUES
from generator.report.stack.su import parse_su, read_su_files, su_frame_of

__all__ = ["PROLOGUES", "ElfImage", "cortex_m_handlers", "parse_disassembly", "parse_su",
           "read_su_files", "run_objdump", "stack_bound", "su_frame_of"]
