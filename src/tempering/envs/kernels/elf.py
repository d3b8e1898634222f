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


_LOAD_TIME_TAGS = {
    12: "DT_INIT (an _init function)",
    13: "DT_FINI (a _fini function)",
    25: "DT_INIT_ARRAY (.init_array: constructors)",
    26: "DT_FINI_ARRAY (.fini_array: destructors)",
    32: "DT_PREINIT_ARRAY (.preinit_array)",
}
"""Dynamic tags whose code the loader runs on its own: before any guard of the candidate's process is
in place (a C kernel is built with -nostartfiles, so gcc adds none of these itself)."""
_IRELATIVE = (37, 1032)  # R_X86_64_IRELATIVE, R_AARCH64_IRELATIVE: an ifunc resolver, run while relocating


def load_time_code(data: bytes) -> list[str]:
    """What in an ELF64 little-endian shared library runs when it is loaded, not when it is called: the
    dynamic tags the loader acts on (read from the program headers, as the loader reads them) and
    ifunc resolvers (STT_GNU_IFUNC symbols, IRELATIVE relocations)."""
    phoff = struct.unpack_from("<Q", data, 0x20)[0]
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    found = []
    for i in range(phnum):
        p_type, _flags, offset, _vaddr, _paddr, filesz = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
        if p_type != 2:  # PT_DYNAMIC
            continue
        for k in range(filesz // 16):
            tag, _value = struct.unpack_from("<qQ", data, offset + 16 * k)
            if tag == 0:
                break
            if tag in _LOAD_TIME_TAGS:
                found.append(_LOAD_TIME_TAGS[tag])
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    for i in range(shnum):
        _name, sh_type, _f, _a, offset, size, _link, _info, _align, entsize = struct.unpack_from(
            "<IIQQQQIIQQ", data, shoff + i * shentsize
        )
        if sh_type == 11 and entsize:  # SHT_DYNSYM
            types = {struct.unpack_from("<IB", data, offset + k * entsize)[1] & 0xF for k in range(size // entsize)}
            if 10 in types:
                found.append("an ifunc symbol (its resolver runs at load time)")
        elif sh_type == 4 and entsize:  # SHT_RELA
            kinds = {
                struct.unpack_from("<QQ", data, offset + k * entsize)[1] & 0xFFFFFFFF for k in range(size // entsize)
            }
            if kinds & set(_IRELATIVE):
                found.append("an IRELATIVE relocation (an ifunc resolver runs at load time)")
    return sorted(set(found))


def check_c_library(data: bytes) -> tuple[list[str], list[str]]:
    """(refusals, exported functions) for a compiled `c` kernel; no refusals: it may be loaded."""
    try:
        undefined, functions = dynamic_symbols(data)
        load_time = load_time_code(data)
    except (ValueError, struct.error, IndexError) as e:
        return [f"the compiled kernel could not be read ({e})"], []
    bad = sorted(s for s in undefined if s not in C_SYMBOLS and not any(p.fullmatch(s) for p in _ALLOWED_PATTERNS))
    refusals = [
        f"the C kernel calls {name}(), which a kernel may not use (allowed: math, memory and OpenMP functions)"
        for name in bad
    ]
    refusals += [
        f"the compiled kernel holds load-time code: {what}; a kernel runs only when it is called (no "
        "constructors, destructors, function pointers in .init_array or ifunc resolvers)"
        for what in load_time
    ]
    return refusals, functions


# -- torch_ext / cuda extensions: what a C++ kernel may call of torch --------------------------------
_CXX_RUNTIME = frozenset(
    {
        "strlen",
        "strcmp",
        "strncmp",
        "strchr",
        "strrchr",
        "strdup",
        "memchr",
        "fprintf",
        "fputc",
        "fputs",
        "fwrite",
        "fflush",
        "stderr",
        "snprintf",
        "vsnprintf",
        "pthread_mutex_lock",
        "pthread_mutex_unlock",
        "__dynamic_cast",
        "__gxx_personality_v0",
        "_Unwind_Resume",
        "__tls_get_addr",
        "__libc_single_threaded",
    }
)
_CXX_ABI = re.compile(r"__cxa_\w+")
"""C symbols the C++ runtime and pybind11's glue need (error messages to stderr, a mutex, exceptions)."""
_PYTHON_DENIED = re.compile(
    r"_?Py(Run_|Import_|Sys_|OS_|File_|Marshal_|Code_|Function_New|Eval_EvalCode|Eval_GetGlobals|Eval_GetLocals"
    r"|Eval_GetFrame|Eval_SetProfile|Eval_SetTrace|Thread_start_new_thread|_CompileString|_Exit|_Finalize"
    r"|_Initialize|_Main)"
)
"""CPython entry points that run code from text or by module name: not for a kernel (pybind11's glue
needs the rest of the C API)."""
_TORCH_ALLOWED = (
    r"at::TensorBase::\w+",  # metadata, data_ptr<T>, the inline methods' out-of-line parts
    r"at::Tensor::\w+",
    r"at::(get_num_threads|get_thread_num|in_parallel_region|init_num_threads|internal::\w+(::\w+)*)",
    r"at::cuda::(getCurrentCUDAStream|getDefaultCUDAStream|getCurrentDeviceProperties|getDeviceProperties)",
    r"at::cuda::CUDAStream::\w+",
    r"c10::(?!Dispatcher|OperatorHandle|impl::OperatorEntry|KernelFunction|BoxedKernel|impl::tls_set"
    r"|impl::_force_tls|impl::PythonDispatcherTLS|impl::TorchDispatchModeTLS|impl::IncludeDispatchKeyGuard"
    r"|impl::ForceDispatchKeyGuard)[\w:]*",
    r"caffe2::TypeMeta::\w+",
    r"torch::(PyWarningHandler|translate_exception_to_python|autograd::AutogradMeta|autograd::VariableHooks)\w*(::~?\w+)*",
    r"pybind11::[\w:]+",
)
"""What an extension may call of libtorch, besides allocating and viewing through `at::_ops` (below):
tensor metadata and data pointers, the parallel-for helpers, stream and device handles, and the
infrastructure (errors, sizes, scalar types) of c10, except the dispatcher and its thread-local state."""
_OPS = re.compile(r"at::_ops::(\w+)::(call|redispatch)")


def qualified_name(symbol: str) -> str | None:
    """`at::_ops::relu::call` for `_ZN2at4_ops4relu4callERKNS_6TensorE`: the scope and name of an Itanium-
    mangled C++ symbol, up to its first template arguments (its parameter types left out); `vtable for X`
    style names give X. None for what this reader does not follow (the caller refuses those)."""
    if not symbol.startswith("_Z"):
        return None
    s, i = symbol, 2
    if s.startswith(("TV", "TI", "TS", "TT"), i):  # vtable, typeinfo, typeinfo name, VTT of a type
        i += 2
        if not s.startswith(("N", "S", "Z"), i) and not s[i : i + 1].isdigit():
            return "typeinfo"  # of a built-in type (bool, const char*)
    elif s.startswith("GV", i):  # a static's guard variable
        i += 2
    if s.startswith("Z", i):  # a local entity: named by the function it lives in
        i += 1
    parts: list[str] = []
    if s.startswith("St", i):
        parts.append("std")
        i += 2
    elif s.startswith("N", i):
        i += 1
        while i < len(s) and s[i] in "rVKRO":
            i += 1
        if s.startswith("St", i):
            parts.append("std")
            i += 2
        elif s.startswith(("Sa", "Sb", "Ss", "Si", "So", "Sd"), i):
            parts += ["std", {"a": "allocator", "b": "basic_string", "s": "string"}.get(s[i + 1], "iostream")]
            i += 2
    elif s.startswith(("nw", "na", "dl", "da"), i):  # operator new / delete
        return "operator " + ("new" if s[i] == "n" else "delete")
    while i < len(s) and s[i].isdigit():
        j = i
        while j < len(s) and s[j].isdigit():
            j += 1
        n = int(s[i:j])
        parts.append(s[j : j + n])
        i = j + n
        while s.startswith("B", i):  # an ABI tag: B5cxx11
            i += 1
            j = i
            while j < len(s) and s[j].isdigit():
                j += 1
            i = j + int(s[i:j] or 0)
    if not parts:
        return None
    return "::".join(parts)


def _extension_refusal(symbol: str, allowed_ops: frozenset, cuda: bool) -> str:
    """Why an extension may not call `symbol` ('' if it may)."""
    if not symbol.startswith("_Z"):
        if symbol in C_SYMBOLS or symbol in _CXX_RUNTIME or _CXX_ABI.fullmatch(symbol):
            return ""
        if any(p.fullmatch(symbol) for p in _ALLOWED_PATTERNS):
            return ""
        if symbol.startswith(("Py", "_Py")):
            if _PYTHON_DENIED.match(symbol):
                return f"{symbol}() runs Python code by name or from text, which a kernel may not do"
            return ""
        if cuda and symbol.startswith(("cuda", "__cuda")) and not symbol.startswith("cudaStreamCreate"):
            return ""
        return f"{symbol}() is not a math, memory or OpenMP function (a kernel may not call it)"
    name = qualified_name(symbol)
    if name is None:
        return f"{symbol} is a C++ symbol this checker cannot read (a kernel does not need it)"
    if name.split("::", 1)[0] in ("std", "__gnu_cxx", "__cxxabiv1", "typeinfo") or name.startswith("operator "):
        return ""
    op = _OPS.fullmatch(name)
    if op:
        if op.group(1) in allowed_ops:
            return ""
        return (
            f"{name} computes with ATen's {op.group(1)}: write that computation in your own kernel (from torch "
            "a kernel may only allocate outputs, take views and copies, and read sizes, strides and data_ptr)"
        )
    if any(re.fullmatch(p, name) for p in _TORCH_ALLOWED):
        return ""
    if name.startswith(("at::", "torch::", "c10::", "caffe2::")):
        return (
            f"{name} is torch code that is not a data accessor (allowed: allocation of outputs, views, tensor "
            "metadata, data_ptr, stream and device handles): compute in your own kernel"
        )
    return f"{name} is not something a kernel may call"


def check_extension(data: bytes, allowed_ops=(), cuda: bool = False) -> tuple[list[str], list[str]]:
    """(refusals, exported functions) for a built torch_ext / cuda extension, from its undefined symbols."""
    from tempering.envs.kernels.harness.policy import ALLOCATION_OPS, ALLOWED_CALLS, ALLOWED_OPS

    try:
        undefined, functions = dynamic_symbols(data)
    except (ValueError, struct.error, IndexError) as e:
        return [f"the built extension could not be read ({e})"], []
    ops = frozenset(ALLOWED_OPS | ALLOWED_CALLS | ALLOCATION_OPS | set(allowed_ops))
    refusals = [why for why in (_extension_refusal(s, ops, cuda) for s in sorted(undefined)) if why]
    return refusals, functions
