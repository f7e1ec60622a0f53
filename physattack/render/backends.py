"""Which path a renderer part takes: its compiled CPU kernel (physattack/render/kernels.py) or PyTorch."""

from __future__ import annotations

import functools

import torch

from physattack.errors import InputError

BACKENDS = ("auto", "torch", "numba")


def check_backend(backend: str, part: str) -> str:
    if backend not in BACKENDS:
        raise InputError(f"{part} backend must be auto, torch or numba, not {backend!r}.")
    return backend


@functools.cache
def numba_kernels():
    """The compiled kernels' module, or None where Numba is not installed."""
    try:
        from physattack.render import kernels
    except ImportError:
        return None
    return kernels


def use_compiled(backend: str, device: torch.device, part: str) -> bool:
    """Whether ``part`` runs its compiled kernel: CPU tensors, a backend allowing it, Numba importable."""
    if backend == "torch" or device.type != "cpu":
        return False
    if numba_kernels() is None:
        if backend == "numba":
            raise InputError(f"{part} backend 'numba' needs Numba (pip install numba); use backend=auto.")
        return False
    return True
