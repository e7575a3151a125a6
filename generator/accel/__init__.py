"""Accelerator plugins: the public interface (see docs/accelerators.md).

A plugin subclasses `Accelerator`, declares `Pattern`s over the Relax graph (int8 operators
through `int8_op`), lowers each match to a PrimFunc that calls its driver (`extern_kernel`),
and names its driver's C files (`Driver`).
"""

from generator.accel.api import (
    Accelerator,
    Driver,
    ExternalSources,
    Lowering,
    Match,
    Option,
    Pattern,
    QuantizedOp,
)
from generator.accel.tir import Param, extern_kernel, int8_op, pair, with_check

__all__ = ["Accelerator", "Driver", "ExternalSources", "Lowering", "Match", "Option",
           "Param", "Pattern", "QuantizedOp", "extern_kernel", "int8_op", "pair",
           "with_check"]
