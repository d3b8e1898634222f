"""Calls into the compiled C library of a `c` submission (read-only; provided by the harness).

`load_c()` returns the library; `lib.fn(*args)` calls the C function `fn` with tensors passed as
data pointers (contiguous, on the CPU), Python ints as `long` (int64) and floats as `float`.
C functions return nothing: they write their results into output tensors the caller allocated.
Every call is counted so that the harness can tell a kernel that is defined but never called.
"""

import ctypes
import os

import torch

CALLS = [0]
"""Number of calls into the library so far (read by the harness)."""


def _arg(a):
    if isinstance(a, torch.Tensor):
        if a.device.type != "cpu":
            raise ValueError("ckernel: tensors passed to a C kernel must be on the CPU")
        if not a.is_contiguous():
            raise ValueError("ckernel: tensor is not contiguous; call .contiguous() before passing it")
        return ctypes.c_void_p(a.data_ptr())
    if isinstance(a, bool) or not isinstance(a, (int, float)):
        raise TypeError(f"ckernel: unsupported argument type {type(a).__name__} (tensor, int or float)")
    return ctypes.c_long(a) if isinstance(a, int) else ctypes.c_float(a)


class CLibrary:
    """The compiled submission; attribute access gives a counted caller of that C function."""

    def __init__(self, path: str):
        self._dll = ctypes.CDLL(os.path.abspath(path))

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            fn = getattr(self._dll, name)
        except AttributeError:
            raise AttributeError(f"ckernel: the compiled C source defines no function {name!r}") from None
        fn.restype = None

        def call(*args):
            CALLS[0] += 1
            fn(*[_arg(a) for a in args])

        return call


def load_c() -> CLibrary:
    """The library compiled from the submission's `C_SOURCE`."""
    return CLibrary(os.environ.get("CKERNEL_LIBRARY", "kernel.so"))
