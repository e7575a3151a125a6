"""Tuning tasks: the distinct kernels a model runs, as our export pipeline makes them.

The model goes through the same steps as `export`: import, the integer rewrite (int8 models
keep int8 kernels), TVM's legalize-and-fuse pipeline. Each PrimFunc main calls is a kernel;
identical kernels (structurally equal) are one task whose weight is its number of calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from generator.errors import ExportError


@dataclass
class Task:
    name: str  # the first kernel of this shape in the model (a C identifier)
    func: object  # tvm.tirx.PrimFunc: the untuned kernel, global_symbol "main"
    weight: int  # calls per inference
    kernels: list[str]  # every kernel name that is this task
    # What the candidates are checked and timed against: the kernel `export` compiles where
    # it differs from `func` (a conv2d searched in its "blocks" form), else None: `func`
    reference: object = None
    # Constant arguments (position → values) at the kernel's first call in the model: what
    # it is measured with (random inputs only for the others)
    constants: dict = field(default_factory=dict)
    # The reference kernel's other tilings (qkernels.Tilings: a clipped conv2d's), measured
    # as candidates next to the design space's
    tilings: object = None

    @property
    def workload(self) -> str:
        """The kernel's structural hash, 16 hex digits: what the log and records key on."""
        from tvm_ffi import structural_hash

        return f"{structural_hash(self.mod) & (2**64 - 1):016x}"

    @property
    def mod(self):
        """The task's workload: an IRModule with one function, `main`."""
        import tvm

        return tvm.IRModule({"main": self.func})


def extract_tasks(model_path: Path, shapes: dict[str, tuple[int, ...]] | None = None) \
        -> list[Task]:
    """The model's tasks, in order of first call."""
    from generator.export import frontend

    mod, _ = frontend.import_model(Path(model_path), shapes or {})
    return module_tasks(mod)


def module_tasks(mod) -> list[Task]:
    """The tasks of a Relax IRModule (weights bound as constants), as `export_relax` lowers
    it. An int8 conv2d is searched in its "blocks" form (qkernels.CONV_FORMS) and checked
    and timed against the kernel export compiles."""
    from tvm import relax

    from generator.export.lower import fuse_with_blocks, kernel_constants, tunable_forms

    fused, quant, _, blocks = fuse_with_blocks(mod)
    calls: list[str] = []

    def visit(expr) -> None:
        if isinstance(expr, relax.Call) and getattr(expr.op, "name", None) == "relax.call_tir":
            calls.append(expr.args[0].name_hint)

    relax.analysis.post_order_visit(fused["main"].body, visit)
    funcs = {name: fused[name] for name in calls}
    tasks = tasks_from_calls(funcs, calls, tunable_forms(blocks, funcs))
    constants = kernel_constants(fused)
    for task in tasks:
        task.constants = constants.get(task.kernels[0], {})
        task.tilings = quant.tilings.get(task.kernels[0])
    return tasks


def tasks_from_calls(funcs: dict, calls: list[str], alternatives: dict | None = None) \
        -> list[Task]:
    """Group kernels `funcs` (name → PrimFunc) called in order `calls` into tasks; a kernel
    with an entry in `alternatives` is searched in that form, against its own."""
    from tvm_ffi import structural_equal

    alternatives = alternatives or {}
    tasks: list[Task] = []
    for name in calls:
        own = funcs[name].with_attr("global_symbol", "main")
        func = own
        if name in alternatives:
            func = alternatives[name].with_attr("global_symbol", "main")
        for task in tasks:
            if structural_equal(task.func, func):
                task.weight += 1
                if name not in task.kernels:
                    task.kernels.append(name)
                break
        else:
            tasks.append(Task(name, func, 1, [name], own if func is not own else None))
    if not tasks:
        raise ExportError("the model's main function calls no TIR kernels; nothing to tune")
    return tasks
