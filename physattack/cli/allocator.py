"""Keep freed CPU memory for reuse: fewer page faults in every step on CPU (glibc only).

glibc's malloc hands every freed block above its mmap threshold back to the operating system, and the
next step's tensors of the same size come back as fresh pages, each faulted in and zeroed on first
touch. An EOT step allocates and frees the same tens of megabytes over and over (the renderer's views,
every victim's activations), so on CPU a share of each step went to page faults: a victim's forward and
backward ran 7-18 % slower on freshly rendered images than on one batch reused (README,
``benchmarks/ensemble_step.py``). Raising the mmap threshold to glibc's 64-bit ceiling (32 MiB) and the
trim threshold to 1 GiB keeps those blocks in the heap for the next step, as PyTorch's advice for CPU
runs (a caching allocator such as jemalloc or tcmalloc) would, without a library to preload.

The price: memory the run freed stays with the process until it exits, up to its peak. The run
setting ``keep_freed_memory: false`` leaves glibc's defaults.
"""

from __future__ import annotations

import ctypes
import sys

M_TRIM_THRESHOLD = -1       # mallopt parameters, from glibc's malloc.h
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 * 2**20  # glibc's largest mmap threshold on 64-bit systems
TRIM_THRESHOLD = 2**30


def keep_freed_memory() -> bool:
    """Ask glibc to keep freed blocks of up to 32 MiB for reuse; True if it took effect (glibc on
    Linux), False elsewhere (nothing is changed there). Safe to call more than once."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):          # not glibc (e.g. musl): leave its allocator alone
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1


__all__ = ["keep_freed_memory"]
