"""What a compiled `c` kernel links against, read from its ELF dynamic symbol table (no tools run).

A C kernel is native code in the candidate's process: what keeps it to arithmetic is what it can call.
`check_c_library` lists the symbols the library leaves undefined (the functions it calls in libc,
libm and libgomp) and refuses any outside `C_SYMBOLS`: no files, processes, signals, timers, dynamic
loading or system calls, so neither the Python runtime nor the judge's channel is within its reach.
The library's own exported functions are what `ckernel.load_c()` may call; the harness resolves
them once, before the submission runs.
"""

from __future__ import annotations

import re
import struct

_MATH = [
    "sin",
    "cos",
    "tan",
    "asin",
    "acos",
    "atan",
    "atan2",
    "sinh",
    "cosh",
    "tanh",
    "asinh",
    "acosh",
    "atanh",
    "exp",
    "exp2",
    "expm1",
    "log",
    "log2",
    "log10",
    "log1p",
    "pow",
    "sqrt",
    "cbrt",
    "hypot",
    "erf",
    "erfc",
    "tgamma",
    "lgamma",
    "fabs",
    "fmax",
    "fmin",
    "fmod",
    "floor",
    "ceil",
    "round",
    "trunc",
    "rint",
    "nearbyint",
    "lround",
    "llround",
    "lrint",
    "llrint",
    "copysign",
    "fma",
    "frexp",
    "ldexp",
    "modf",
    "remainder",
    "nextafter",
    "scalbn",
    "ilogb",
    "logb",
    "fdim",
    "sincos",
    "exp10",
]
C_SYMBOLS = frozenset(
    [f for name in _MATH for f in (name, name + "f", name + "l")]
    + [
        "memcpy",
        "memmove",
        "memset",
        "memcmp",
        "malloc",
        "calloc",
        "realloc",
        "free",
        "aligned_alloc",
        "posix_memalign",
        "abort",
        "__assert_fail",
        "__stack_chk_fail",
        "__memcpy_chk",
        "__memmove_chk",
        "__memset_chk",
        "__cxa_finalize",
        "__gmon_start__",
        "_ITM_deregisterTMCloneTable",
        "_ITM_registerTMCloneTable",
        "__errno_location",
        "qsort",
        "omp_get_thread_num",
        "omp_get_num_threads",
        "omp_get_max_threads",
        "omp_get_num_procs",
        "omp_in_parallel",
    ]
)
"""Undefined symbols a `c` kernel may have: libm, memory, a few libc helpers gcc emits, OpenMP."""
_ALLOWED_PATTERNS = (
    re.compile(r"GOMP_[A-Za-z0-9_]+"),  # what `#pragma omp` compiles to
    re.compile(r"_ZGV[a-zA-Z]N\d+[a-z0-9]*_[a-z0-9]+"),  # glibc's vector math (-ffast-math): _ZGVdN8v_expf
    re.compile(r"__[a-z0-9]+_finite"),  # older glibc's finite-math entry points
)


def dynamic_symbols(data: bytes) -> tuple[set[str], list[str]]:
    """(undefined symbols, exported functions) of an ELF64 little-endian shared library."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file")
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = []
    for i in range(shnum):
        base = shoff + i * shentsize
        _name, sh_type, _flags, _addr, offset, size, link, _info, _align, entsize = struct.unpack_from(
            "<IIQQQQIIQQ", data, base
        )
        sections.append((sh_type, offset, size, link, entsize))
    undefined, functions = set(), []
    for sh_type, offset, size, link, entsize in sections:
        if sh_type != 11 or not entsize:  # SHT_DYNSYM
            continue
        str_off, str_size = sections[link][1], sections[link][2]
        strtab = data[str_off : str_off + str_size]
        for k in range(size // entsize):
            st_name, st_info, _other, st_shndx, _value, _size = struct.unpack_from(
                "<IBBHQQ", data, offset + k * entsize
            )
            end = strtab.find(b"\0", st_name)
            name = strtab[st_name:end].decode(errors="replace") if st_name else ""
            if not name:
                continue
            name = name.split("@", 1)[0]
            if st_shndx == 0:
                undefined.add(name)
            elif st_info & 0xF == 2 and st_info >> 4 in (1, 2):  # STT_FUNC, global or weak
                functions.append(name)
    return undefined, sorted(set(functions))


def check_c_library(data: bytes) -> tuple[list[str], list[str]]:
    """(refusals, exported functions) for a compiled `c` kernel; no refusals: it may be loaded."""
    try:
        undefined, functions = dynamic_symbols(data)
    except (ValueError, struct.error, IndexError) as e:
        return [f"the compiled kernel could not be read ({e})"], []
    bad = sorted(s for s in undefined if s not in C_SYMBOLS and not any(p.fullmatch(s) for p in _ALLOWED_PATTERNS))
    refusals = [
        f"the C kernel calls {name}(), which a kernel may not use (allowed: math, memory and OpenMP functions)"
        for name in bad
    ]
    return refusals, functions
