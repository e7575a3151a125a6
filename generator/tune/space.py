"""MetaSchedule's search space for kernels compiled by TVM's C codegen.

TVM 0.27 has no default schedule rules for the `c` target kind (`TuneContext` fails with
"Unsupported kind: c"), so the rules are named here: CPU multi-level tiling, inlining, and
loop unrolling; no parallel loops (the runtime has no thread pool) and no vectorized loops
(C99 has no vector types). `MutateComputeLocation` is left out: with the `c` target it
crashes TVM 0.27 (segmentation fault while the tune context initializes).
`DisallowDynamicLoop` is left out too: the int8 convolutions of `qkernels.py` clip their
window loops to the input (`for rh in range(h_lo, h_hi)`), which it refuses outright, and
C has no trouble with such loops.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

TARGET = "c"
TENSOR_INTRINSICS = "tvm.s_tir.tensor_intrin"
MAX_INNERMOST_FACTOR = 64
UNROLL_STEPS = [0, 16, 64]  # 512: TVM takes minutes to compile some unrolled convolutions
MUTATOR_PROBS = {"tile_size": 0.9, "unroll": 0.1}


def space_generator():
    """PostOrderApply with rules that give plain-C-friendly schedules."""
    from tvm.s_tir import meta_schedule as ms

    rules = ms.schedule_rule
    sch_rules = [
        rules.AutoInline(into_producer=False, into_consumer=True, inline_const_tensor=True,
                         disallow_if_then_else=True, require_injective=True,
                         require_ordered=True),
        rules.MultiLevelTiling(structure="SSRSRS", max_innermost_factor=MAX_INNERMOST_FACTOR,
                               reuse_write=rules.ReuseType(req="may", levels=[1, 2],
                                                           scope="global")),
        rules.ParallelizeVectorizeUnroll(max_jobs_per_core=-1, max_vectorize_extent=-1,
                                         unroll_max_steps=UNROLL_STEPS, unroll_explicit=True),
    ]
    post = ms.postproc
    postprocs = [post.RewriteParallelVectorizeUnroll(), post.RewriteReductionBlock()]
    mut = ms.mutator
    mutator_probs = {mut.MutateTileSize(): MUTATOR_PROBS["tile_size"],
                     mut.MutateUnroll(): MUTATOR_PROBS["unroll"]}
    return ms.space_generator.PostOrderApply(sch_rules=sch_rules, postprocs=postprocs,
                                             mutator_probs=mutator_probs)


def skip_tensor_intrinsics() -> None:
    """Register TVM's tensor-intrinsic package without running its `__init__`.

    `TuneContext` imports `tvm.s_tir.tensor_intrin`, whose `__init__` parses about 250
    TVMScript intrinsics for CUDA, x86, Arm, ROCm and Hexagon; TVMScript's parser calls
    `inspect.stack()` for each, which scans every loaded module per import-machinery frame:
    a minute of a `tune` run on an idle core, several on a busy one. The rules above use no
    tensor intrinsic; the package's submodules still import on demand (its `__path__` is
    set)."""
    if TENSOR_INTRINSICS in sys.modules:
        return
    spec = importlib.util.find_spec(TENSOR_INTRINSICS)
    if spec is None:
        return
    sys.modules[TENSOR_INTRINSICS] = importlib.util.module_from_spec(spec)
    parent, _, child = TENSOR_INTRINSICS.rpartition(".")
    setattr(importlib.import_module(parent), child, sys.modules[TENSOR_INTRINSICS])


def tune_context(mod, name: str, strategy: str = "evolutionary", seed: int = -1):
    """A TuneContext for one task (single-threaded: the machine is shared)."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    skip_tensor_intrinsics()

    return ms.TuneContext(mod=mod, target=tvm.target.Target(TARGET),
                          space_generator=space_generator(), search_strategy=strategy,
                          task_name=name, rand_state=seed, num_threads=1)
