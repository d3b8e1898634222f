"""Calls into the compiled C library of a `c` submission (read-only; provided by the harness).

A submission imports `from ckernel import load_c`: `load_c()` returns the library, and `lib.fn(*args)`
calls the C function `fn` with tensors passed as data pointers (contiguous, on the CPU), Python ints
as `long` (int64) and floats as `float`. C functions return nothing: they write their results into
output tensors the caller allocated.

The harness opens the library before the submission runs (`open_library`) and hands the submission
a `load_c` bound to it. Every call is counted in a counter that lives in the harness's closure, not
in this module: there is nothing here for a submission to import, read or increment.
"""

import ctypes
import os

import torch


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


def open_library(path: str, functions, on_call, after=lambda: None):
    """`load_c` for the library at `path`: its exported `functions` are resolved now (nothing is
    looked up later), `on_call()` runs before each call and `after()` after it."""
    dll = ctypes.CDLL(os.path.abspath(path))
    resolved = {}
    for name in functions:
        fn = getattr(dll, name)
        fn.restype = None
        resolved[name] = fn

    def caller(name):
        fn = resolved.get(name)
        if fn is None:
            raise AttributeError(f"ckernel: the compiled C source defines no function {name!r}")

        def call(*args):
            on_call()
            with torch._C.DisableTorchFunction():  # the harness's own conversions: not the submission's calls
                converted = [_arg(a) for a in args]
            fn(*converted)
            after()

        return call

    class CLibrary:
        """The compiled submission; attribute access gives a counted caller of that C function."""

        __slots__ = ()

        def __getattr__(self, name):
            if name.startswith("_"):
                raise AttributeError(name)
            return caller(name)

    library = CLibrary()

    def load_c():
        """The library compiled from the submission's `C_SOURCE`."""
        return library

    return load_c
