"""microtvm-gen: Model Library Format archives to firmware for microcontrollers."""

__version__ = "0.1.0"

# Version of the C runtime ABI the generated projects are built against.
# templates/common/include/mtvg/runtime.h holds the same number (a test checks it).
RUNTIME_ABI_VERSION = 2
