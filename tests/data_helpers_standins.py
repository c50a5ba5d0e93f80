"""Stand-ins for the dataset helpers (megatron.core.datasets.helpers) that crash: the checks before
a launch and doctor must survive them."""

from __future__ import annotations

# A helpers module whose build_sample_idx dereferences a null pointer: a real SIGSEGV.
SEGFAULTING_HELPERS = "import ctypes\n\ndef build_sample_idx(*args):\n    return ctypes.string_at(0)\n"
