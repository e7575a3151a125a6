"""What `microtvm-gen report` knows about a firmware: memory by region, the model's layers,
the stack bound. Each is a dataclass with `to_json()`; the JSON is what `--json` prints and
what the pictures (`pictures.py`) draw, so its keys are the report's schema (docs/json.md)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

# What a block of a memory region holds. The memory map colours blocks by category.
CATEGORIES = (
    "weights",        # the model's constants
    "kernel-code",    # the model's kernels (one block per kernel)
    "model-code",     # the model's run function and other code of the archive
    "accelerator",    # accelerator drivers and CMSIS-NN
    "runtime",        # microtvm-gen's runtime (runtime/src)
    "app",            # the generated application (app/) and platform code (platform/)
    "startup-libc",   # C library, compiler support, start files
    "activations",    # the model's activation pool (or the runtime's workspace arena)
    "io",             # input and output buffers
    "stack",          # the stack reservation (not a section: the linker script's size)
    "other",          # sections no rule above claims (named in the block's detail)
)


@dataclass
class Block:
    """Bytes of one kind in one region, e.g. 27,248 B of weights in FLASH."""

    label: str  # short text drawn in the map: "weights", "q_conv2d", "runtime"
    category: str  # one of CATEGORIES
    bytes: int
    address: int | None = None  # lowest address, when the bytes are one range
    detail: str = ""  # a longer line for hover titles: what is in it, where it came from

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class RegionUse:
    """One memory region of the board (FLASH, RAM, DTCM...) and what fills it."""

    name: str
    kind: str  # "flash", "ram", a [[regions]] kind (boards.REGION_KINDS), "host", "other"
    origin: int
    size: int | None  # None: a host program's memory (no fixed size)
    blocks: list[Block] = field(default_factory=list)
    sections: dict[str, int] = field(default_factory=dict)  # ELF section → bytes here

    @property
    def section_bytes(self) -> int:
        """What the ELF's sections take here: the blocks other than the stack reservation."""
        return sum(b.bytes for b in self.blocks if b.category != "stack")

    @property
    def used(self) -> int:
        return sum(b.bytes for b in self.blocks)

    @property
    def free(self) -> int | None:
        return None if self.size is None else self.size - self.used

    def to_json(self) -> dict:
        return {"name": self.name, "kind": self.kind, "origin": self.origin, "size": self.size,
                "used": self.used, "free": self.free, "sections": self.sections,
                "blocks": [b.to_json() for b in self.blocks]}


@dataclass
class TensorUse:
    shape: list[int]
    dtype: str
    kind: str  # "input" | "output" | "constant" | "activation"
    bytes: int
    where: str = ""  # "pool+8000", "input 'input_1'", "constant 3"

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class Layer:
    """One call of the run function: a kernel (fused operators) with its tensors."""

    index: int
    kernel: str  # the kernel's name without the module prefix: "q_conv2d1"
    operators: list[str]  # the model operators fused into it: ["conv2d", "relu"]
    inputs: list[TensorUse]
    outputs: list[TensorUse]
    macs: int | None  # multiply-accumulates of one call (None: not known for this archive)
    weights_bytes: int  # constants it reads (each constant counted at its first use)
    implementation: str  # "ours" | "cmsis-nn" | "accelerator:<name>" | "tvm" (older archives)
    code_bytes: int | None = None  # the kernel function's size in the ELF (shared by calls)
    profile: dict | None = None  # run --profile: {"instructions"|"cycles"|"ns": n, "share": f}

    def to_json(self) -> dict:
        out = asdict(self)
        out["inputs"] = [t.to_json() for t in self.inputs]
        out["outputs"] = [t.to_json() for t in self.outputs]
        return out


@dataclass
class StackBound:
    """The deepest the stack can go, from the call graph and each function's frame."""

    bound_bytes: int | None  # None: unbounded (see reason)
    reserved_bytes: int | None  # what the linker script reserves (None: host, the OS's)
    path: list[str] = field(default_factory=list)  # the deepest call chain found
    reason: str = ""  # why unbounded, or what the bound leaves out

    def to_json(self) -> dict:
        return asdict(self)
