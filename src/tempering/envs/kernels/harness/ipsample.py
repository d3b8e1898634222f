"""Where the candidate's CPU time goes, seen from the judge: its threads' instruction pointers sampled
with perf events the judge opens, and each sample placed in the object it lies in.

The symbol check and the dispatch guard judge how code was reached; this judges what ran. Native code
in the candidate's process cannot disable, read or forge it: the events belong to the judge (opened on
each of the candidate's threads by thread id, user space only, a software clock), their ring buffers
are mapped in the judge's memory, and the process maps they are matched against are read from /proc by
the judge. The kernel counts a thread's user-mode time and records where it was every `period_ns` of
it, so a call's samples are a fair draw of where its time went, whatever the call does to hide it.
"""

import ctypes
import errno
import mmap
import os
import re
import struct
import threading

import numpy

_NR = {"x86_64": 298, "aarch64": 241}[os.uname().machine]
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
PAGE = mmap.PAGESIZE
DATA_PAGES = 16
"""Ring buffer per thread (64 KiB: 4096 samples); drained after every call, the period doubled for the
next call whenever one overflowed it."""
MIN_LIBRARY_SAMPLES = 8
"""Fewer library samples than this are never a refusal: a stray sample in a torch function the lists
miss (a tiny kernel draws only a handful outside the harness's code) is not a kernel's work."""
TRIAL_PERIOD_NS = 100_000
"""Correctness trials (untimed): a sample per 100 us of a thread's CPU time."""
TIMED_PERIOD_NS = 1_000_000
"""Timed calls: a sample per millisecond. Each sample costs the sampled thread about 13 us of CPU time on
the development machine (a VM's timer), 1.3% here, 13% at 100 us (docs/kernels.md)."""
_ENABLE, _DISABLE, _PERIOD = 0x2400, 0x2401, 0x40082404
_RECORD_SAMPLE, _RECORD_LOST = 9, 2

RUNTIME = ("libc.so", "libm.so", "libmvec.so", "libgomp", "libiomp", "ld-linux", "libstdc++", "libgcc_s", "[vdso]")
"""Objects any kernel may run in: the C and C++ runtimes, math (libm, libmvec), OpenMP, the loader."""
HARNESS = ("libpython", "libtorch_python.so", "libffi.so", "dispatch_guard.so", "python3")
"""The harness's own objects in the candidate's process: the interpreter and its modules, torch's Python
bindings, the dispatch guard."""
FRAMEWORK = ("libtorch_cpu.so", "libtorch.so", "libc10.so")
"""torch's libraries: honest calls spend time in their allocation, views, dispatch and the output's copy
(the functions FRAMEWORK_CODE names); everything else in them (MKL, oneDNN, ATen's kernels) is library."""
FRAMEWORK_CODE = re.compile(
    r"^_ZN?K?(3c10|5torch|2atL?(4_ops|6detail|4impl|10TensorBase|6Tensor|11TensorMaker|7Context|13globalContext"
    r"|14RecordFunction|\d+getStepCallbacks|\d+(Tensor)?Iterator\w*|\d+(assert_no|has_internal_overlap|internal)"
    r"|11OperandInfo))|^_ZN?K?R?St|^_ZSt|^_init$"
)
"""torch's functions an honest call runs (mangled names): c10 (tensors, allocation, dispatch), the
dispatcher's stubs, autograd's bookkeeping, tensor methods and iterators, the C++ library's templates
compiled into torch, and the PLT."""
NATIVE_CODE = re.compile(
    r"2at6native(L)?\d+(copy|empty|view|detach|reshape|alias|as_strided|expand|contiguous|clone|fill|zero|resize"
    r"|select|slice|permute|transpose|unsqueeze|squeeze|narrow|flatten|_reshape|_unsafe_view|set_"
    r"|DispatchStubImpl)|copy_kernel|fill_kernel"
)
"""Of ATen's own functions (`at::native`, anywhere in a name: its vectorised loops are c10::function_ref
callbacks), the allocation, views, fills and copies (their loops included); ATen's other kernels
(`relu_kernel`, `add_kernel`, ...) are library code. Measured on the honest twins: see docs/kernels.md."""


_KERNEL = re.compile(r"\d[a-z0-9_]*_kernel(?![a-z0-9_])")
"""A compute kernel's name (`relu_kernel`, `add_kernel`), not the dispatcher's `wrap_kernel_functor`."""


def framework(name):
    """Whether a function of torch's libraries is one an honest call runs (see FRAMEWORK_CODE)."""
    if "2at6native" in name or _KERNEL.search(name):
        return bool(NATIVE_CODE.search(name))
    return bool(FRAMEWORK_CODE.search(name))


def classify(path, address, workdir):
    """`own` (the kernel's object or its host), `runtime`, `harness`, or `library` (named: object:function)."""
    base = os.path.basename(path)
    if path.startswith(workdir) and not base.startswith("dispatch_guard"):
        return "own"
    if any(base.startswith(p) for p in RUNTIME):
        return "runtime"
    if any(base.startswith(p) for p in HARNESS) or (".cpython-" in base and "/lib-dynload/" in path):
        return "harness"
    if base in FRAMEWORK or any(base.startswith(f) for f in FRAMEWORK):
        fn = function_at(path, address)
        if framework(fn):
            return "harness"
        return f"library {base}:{fn or hex(address)}"
    return f"library {base}"


class Unavailable(Exception):
    """perf events cannot be opened here at all (the judge's own test failed): say so, never pass."""


class Untraceable(Exception):
    """The candidate's thread refused the judge (it made itself non-dumpable), or one started that the
    judge did not attach to."""


def _attr(period_ns):
    """perf_event_attr (VER0, 64 bytes): PERF_TYPE_SOFTWARE / PERF_COUNT_SW_TASK_CLOCK sampling
    PERF_SAMPLE_IP, disabled until enabled, user space only (exclude_kernel, exclude_hv)."""
    flags = 1 | (1 << 5) | (1 << 6)
    return struct.pack("<IIQQQQQIIQ", 1, 64, 1, period_ns, 1, 0, flags, 0, 0, 0)


def _open(tid, period_ns):
    buf = ctypes.create_string_buffer(_attr(period_ns), 64)
    fd = _libc.syscall(_NR, buf, tid, -1, -1, 8)  # cpu -1: this thread on any CPU; PERF_FLAG_FD_CLOEXEC
    if fd < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    try:
        ring = mmap.mmap(fd, (1 + DATA_PAGES) * PAGE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    except OSError:
        os.close(fd)
        raise
    return fd, ring


def probe(period_ns=100_000):
    """Raise Unavailable (naming why) unless this process can sample a thread of its own."""
    try:
        fd, ring = _open(threading.get_native_id(), period_ns)  # named: the sandbox refuses pid 0
    except OSError as e:
        raise Unavailable(
            f"perf_event_open for the judge's own thread failed: {errno.errorcode.get(e.errno, e.errno)} "
            f"({e.strerror}); kernel.perf_event_paranoid must be 2 or less, the sandbox must allow per-thread "
            "perf events (gVisor has none), and the user's perf_event_mlock_kb must hold the ring buffers"
        ) from None
    ring.close()
    os.close(fd)


class Sampler:
    """Per-thread sampling events on the given processes (the candidate, its kernel host)."""

    def __init__(self, pids, period_ns=TRIAL_PERIOD_NS):
        self.pids, self.period = list(pids), period_ns
        self.events = {}  # tid -> (fd, ring)
        self.lost = 0
        self.samples = []  # (phase, pid, instruction pointer) of the windows so far (drained)
        self.phase = "first"  # what the windows being sampled are: "first" (call), "trials", then "timed"
        self.maps = {}  # pid -> [(start, end, path)] of executable mappings
        for pid in self.pids:
            for tid in self._tids(pid):
                self._attach(pid, tid)

    @staticmethod
    def _tids(pid):
        try:
            return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            return []

    def _attach(self, pid, tid):
        try:
            self.events[tid] = (*_open(tid, self.period), pid)
        except OSError as e:
            if e.errno == errno.ESRCH:  # gone already
                return
            if e.errno in (errno.EACCES, errno.EPERM):
                raise Untraceable(
                    f"the judge cannot sample thread {tid} of process {pid} ({e.strerror}): the process made "
                    "itself non-traceable (PR_SET_DUMPABLE 0)"
                ) from None
            raise Unavailable(f"perf_event_open on thread {tid}: {e.strerror}") from None

    def new_threads(self):
        """Threads of the sampled processes the judge has no event on (started after it attached)."""
        return [tid for pid in self.pids for tid in self._tids(pid) if tid not in self.events]

    def enable(self):
        for fd, _, _ in self.events.values():
            _libc.ioctl(fd, _ENABLE, 0)

    def disable(self):
        for fd, _, _ in self.events.values():
            _libc.ioctl(fd, _DISABLE, 0)

    def drain(self):
        """Move every sample out of the rings; lost samples are counted (and the period doubled)."""
        lost = 0
        for _fd, ring, pid in self.events.values():
            head = struct.unpack_from("<Q", ring, 1024)[0]
            tail = struct.unpack_from("<Q", ring, 1032)[0]
            size = DATA_PAGES * PAGE
            data = ring[PAGE:]
            while tail < head:
                at = tail % size
                kind, _misc, length = struct.unpack_from("<IHH", _wrap(data, at, 8))
                body = _wrap(data, at + 8, length - 8)
                if kind == _RECORD_SAMPLE:
                    self.samples.append((self.phase, pid, struct.unpack_from("<Q", body)[0]))
                elif kind == _RECORD_LOST:
                    lost += struct.unpack_from("<Q", body, 8)[0]
                tail += length
            struct.pack_into("<Q", ring, 1032, tail)
        if lost:
            self.lost += lost
            self.set_period(self.period * 2)

    def set_period(self, period_ns):
        """Sample every `period_ns` of a thread's CPU time from the next call on."""
        self.period = period_ns
        for fd, _, _ in self.events.values():
            _libc.ioctl(fd, _PERIOD, ctypes.byref(ctypes.c_uint64(self.period)))

    def close(self):
        for fd, ring, _ in self.events.values():
            ring.close()
            os.close(fd)
        self.events = {}

    # -- attribution ------------------------------------------------------------------------------------
    def _mappings(self, pid):
        out = []
        try:
            with open(f"/proc/{pid}/maps") as f:
                for line in f:
                    parts = line.split(maxsplit=5)
                    if len(parts) >= 5 and "x" in parts[1]:
                        start, end = (int(v, 16) for v in parts[0].split("-"))
                        out.append((start, end, int(parts[2], 16), parts[5].strip() if len(parts) > 5 else ""))
        except FileNotFoundError:  # gone: its death is the verdict
            pass
        except PermissionError:
            raise Untraceable(
                f"the judge cannot read process {pid}'s memory map: the process made itself non-traceable "
                "(PR_SET_DUMPABLE 0)"
            ) from None
        return out

    def where(self, pid, ip):
        """(path, address in the object's own ELF addresses) of the executable mapping holding `ip` in `pid`
        (its maps read once, again on a miss); ("[unmapped]", ip) if none holds it."""
        for fresh in (False, True):
            if fresh or pid not in self.maps:
                self.maps[pid] = self._mappings(pid)
            for start, end, offset, path in self.maps[pid]:
                if start <= ip < end:
                    return path or "[anonymous]", _elf_address(path, ip - start + offset)
        return "[unmapped]", ip

    def attribute(self, phases):
        """[(path, ELF address)] of the samples of `phases` so far."""
        return [self.where(pid, ip) for p, pid, ip in self.samples if p in phases]


def _wrap(data, at, n):
    size = len(data)
    at %= size
    return data[at : at + n] if at + n <= size else data[at:] + data[: n - (size - at)]


_SEGMENTS: dict = {}  # path -> [(file offset, end, ELF address)] of its PT_LOAD segments
_SYMBOLS: dict = {}  # path -> its functions (see _functions)


def _elf(path):
    try:
        f = open(path, "rb")
    except OSError:
        return None
    with f:
        try:
            return mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        except (OSError, ValueError):
            return None


def _elf_address(path, file_offset):
    """The ELF virtual address of a file offset of `path` (its PT_LOAD segments), or the offset itself."""
    if path not in _SEGMENTS:
        segments = []
        data = _elf(path) if path.startswith("/") else None
        if data is not None and data[:4] == b"\x7fELF":
            phoff = struct.unpack_from("<Q", data, 0x20)[0]
            phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
            for i in range(phnum):
                kind, _flags, offset, vaddr, _paddr, filesz = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
                if kind == 1:  # PT_LOAD
                    segments.append((offset, offset + filesz, vaddr))
            data.close()
        _SEGMENTS[path] = segments
    for start, end, vaddr in _SEGMENTS[path]:
        if start <= file_offset < end:
            return file_offset - start + vaddr
    return file_offset


def function_at(path, address):
    """The name of the function of `path` (its .symtab, local functions included, else its .dynsym) that
    holds `address`, or "" (a stripped object, or code between functions)."""
    if path not in _SYMBOLS:
        _SYMBOLS[path] = _functions(path)
    table, strings = _SYMBOLS[path]
    i = int(numpy.searchsorted(table["value"], address, side="right")) - 1
    if i < 0:
        return ""
    value, size, name = int(table["value"][i]), int(table["size"][i]), int(table["name"][i])
    if size and address >= value + size:
        return ""
    end = strings.find(b"\0", name)
    return strings[name:end].decode(errors="replace")


_SYM = numpy.dtype(
    [("name", "<u4"), ("info", "u1"), ("other", "u1"), ("shndx", "<u2"), ("value", "<u8"), ("size", "<u8")]
)


def _functions(path):
    """(`path`'s functions sorted by address, as an Elf64_Sym array; its string table's bytes)."""
    data = _elf(path) if path.startswith("/") else None
    if data is None or data[:4] != b"\x7fELF":
        return numpy.zeros(0, _SYM), b""
    with data:
        shoff = struct.unpack_from("<Q", data, 0x28)[0]
        shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
        sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
        for wanted in (2, 11):  # SHT_SYMTAB (every function), else SHT_DYNSYM (the exported ones)
            for _n, kind, _f, _a, offset, size, link, _i, _al, entsize in sections:
                if kind != wanted or entsize != 24:
                    continue
                syms = numpy.frombuffer(data[offset : offset + size], _SYM)  # a copy: the map closes
                functions = syms[((syms["info"] & 0xF) == 2) & (syms["shndx"] != 0) & (syms["value"] != 0)]
                strtab = sections[link]
                functions = functions[numpy.argsort(functions["value"], kind="stable")]
                return functions, bytes(data[strtab[4] : strtab[4] + strtab[5]])
    return numpy.zeros(0, _SYM), b""


def warm():
    """Read torch's symbol tables now (in a warm worker, once for every judge it forks)."""
    import torch

    lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    for name in FRAMEWORK:
        if os.path.exists(os.path.join(lib, name)):
            function_at(os.path.join(lib, name), 0)
