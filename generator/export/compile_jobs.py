"""Compiling many kernels to C in several processes, one C file as the result.

TVM lowers kernels one after another, single-threaded; a tuning batch of 17 kernels is
dominated by it. The kernels are split round-robin over `jobs` processes (`generator.forked`:
each child gets the kernels as they are in memory), each compiles its share with
`compile_plain_kernels`, and the C sources are joined: one preamble (TVM's includes and
its library-context pointer, which must be defined once), then every kernel. Joining is done
only when each source is a preamble followed by nothing but its kernels' declarations and
definitions; otherwise (a helper function TVM emitted for an intrinsic, say) everything is
compiled again in one process.
"""

from __future__ import annotations

import re

from generator.export.lower import compile_plain_kernels
from generator.forked import Forked

MIN_KERNELS_PER_JOB = 2  # a single kernel gets an unused companion of a fixed name
FIRST_KERNEL = '#ifdef __cplusplus\nextern "C"\n#endif\n'
# What a kernel section holds at column 0 besides `TVM_DLL` lines: the extern "C" guard,
# closing braces, blank lines. Everything else there is indented (a kernel's body).
_TOP_LEVEL_OK = re.compile(r'(#ifdef __cplusplus|extern "C"|#endif|\}|TVM_DLL .*|)$')


def compile_kernels(funcs: dict, prefix: str, shrink: bool, jobs: int) -> tuple[str, str]:
    """`compile_plain_kernels(funcs, prefix, shrink)`, the work shared by `jobs` processes."""
    jobs = min(jobs, len(funcs) // MIN_KERNELS_PER_JOB)
    if jobs <= 1:
        return compile_plain_kernels(funcs, prefix, shrink)
    names = list(funcs)
    shares = [{n: funcs[n] for n in names[i::jobs]} for i in range(jobs)]
    # In the caller's process group: the tuner stops its build child's group on Ctrl-C.
    children = [Forked(lambda share=share: list(compile_plain_kernels(share, prefix, shrink)),
                       own_group=False)
                for share in shares[1:]]
    try:
        results = [compile_plain_kernels(shares[0], prefix, shrink)]
        results += [tuple(child.result()) for child in children]
    finally:
        for child in children:
            child.stop()
    joined = join_c_sources([c for c, _ in results])
    if joined is None:
        return compile_plain_kernels(funcs, prefix, shrink)
    return joined, "\n".join(tir for _, tir in results)


def join_c_sources(sources: list[str]) -> str | None:
    """One C file from several of TVM's: the first preamble, then each file's kernels; None
    when a file holds anything but a preamble and kernels, or the preambles differ."""
    preambles, kernels = [], []
    for source in sources:
        at = source.find(FIRST_KERNEL)
        if at < 0:
            return None
        rest = source[at:]
        if not all(_TOP_LEVEL_OK.match(line) for line in rest.splitlines()
                   if not line.startswith((" ", "\t"))):
            return None
        preambles.append(source[:at])
        kernels.append(rest)
    if any(p != preambles[0] for p in preambles[1:]):
        return None
    return preambles[0] + "".join(kernels)
