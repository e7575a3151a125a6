"""microtvm-gen: Model Library Format archives to firmware for microcontrollers."""

from generator.abi import constant as _abi_constant

__version__ = "0.1.0"

# Version of the C runtime ABI the generated projects are built against: read from
# MTVG_RUNTIME_ABI_VERSION in templates/common/include/mtvg/runtime.h, which says when it
# changes.
RUNTIME_ABI_VERSION = _abi_constant("MTVG_RUNTIME_ABI_VERSION")
