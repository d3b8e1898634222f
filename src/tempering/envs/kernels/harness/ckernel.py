"""Calls into the compiled C library of a `c` submission (read-only; provided by the harness).

A submission imports `from ckernel import load_c`: `load_c()` returns the library, and `lib.fn(*args)`
calls the C function `fn` with tensors passed as data pointers (contiguous, on the CPU), Python ints
as `long` (int64) and floats as `float`. C functions return nothing: they write their results into
output tensors the caller allocated.

The library never enters this process (which holds Python and torch): it runs in the kernel host
(kernel_host.c), a process of libc, libm and OpenMP only, started before the submission runs. For each
call the tensors' bytes are copied into an argument memory both processes map, the host calls the
function on them, and they are copied back (each tensor's storage once, so arguments that share memory
still share it). Every call is counted in a counter that lives in the harness's closure, not in this
module: there is nothing here for a submission to import, read or increment.
"""

import ctypes
import os
import signal
import socket
import struct
import subprocess

import syscalls
import torch
import wire

_REQUEST = struct.Struct("=IIII16q8f16B16Q")  # op, function, pointer mask, count; ints, floats; memory ids, sizes
_ANSWER = struct.Struct("=ii6q200s")  # status, syscall number, its arguments, text
_CALL, _ARENA, _FILTER, _MAP, _UNMAP = 1, 2, 3, 4, 5
_OK, _DENIED = 0, 2
_MAX_INTS, _MAX_FLOATS, _ALIGN, _MAX_MAPS = 16, 8, 64, 64
_NONE = (0,) * (2 * _MAX_INTS)
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]


class KernelFailed(Exception):
    """The kernel host ended during a call; `status` and the message say how (for the judge)."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status, self.message = status, message


class Host:
    """The kernel host process and its argument memory."""

    def __init__(self, binary, library, functions, threads, program):
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock = mine
        self.functions = {name: k for k, name in enumerate(functions)}
        args = [
            os.path.abspath(binary),
            str(theirs.fileno()),
            os.path.abspath(library),
            str(threads),
            str(os.getpid()),
            *functions,
        ]
        self.proc = subprocess.Popen(args, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, close_fds=True)
        theirs.close()
        self.pid = self.proc.pid
        self.arena, self.size, self.fd = 0, 0, -1
        self.ids: dict[tuple, int] = {}  # memfd-backed memory the host has mapped -> its id there
        self.free_ids = list(range(_MAX_MAPS - 1, 0, -1))
        self.transient: list[tuple] = []  # this call's inputs: unmapped after it
        self.failure: KernelFailed | None = None  # once it has ended, every later call fails the same way
        code = program(self.pid)
        self.sock.send(_REQUEST.pack(_FILTER, 0, 0, len(code), *([0] * _MAX_INTS), *([0.0] * _MAX_FLOATS), *_NONE))
        self._send(code, "starting")

    def _send(self, data, what, fds=()):
        try:
            if fds:
                self.sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack(f"{len(fds)}i", *fds))])
            else:
                self.sock.send(data)
        except OSError:  # it has ended: its status says how
            pass
        self._answer(what)

    def _answer(self, what):
        if self.failure is not None:
            raise self.failure
        try:
            data = self.sock.recv(_ANSWER.size)
        except OSError:
            data = b""
        try:
            self._judge(data, what)
        except KernelFailed as e:
            self.failure = e
            raise

    def _judge(self, data, what):
        if len(data) == _ANSWER.size:
            status, nr, *rest = _ANSWER.unpack(data)
            args, text = rest[:6], rest[6].rstrip(b"\0").decode(errors="replace")
            if status == _OK:
                return
            if status == _DENIED:
                self.proc.wait()
                raise KernelFailed("forbidden_op", "the kernel made the system call " + syscalls.describe(nr, args))
            raise KernelFailed("runtime_error", f"the kernel host failed {what}: {text}")
        if data:  # not an answer the host writes: the kernel wrote on the channel itself
            self.proc.kill()
            self.proc.wait()
            raise KernelFailed("tampering", f"the kernel wrote on the kernel host's channel to the harness ({what})")
        code = self.proc.wait()
        if code == -signal.SIGSYS:
            raise KernelFailed("forbidden_op", f"the kernel made a system call a kernel may not make ({what})")
        if code == -signal.SIGXCPU:
            raise KernelFailed("timeout", f"the C kernel ran past its CPU time limit ({what})")
        if code >= 0:
            raise KernelFailed("early_exit", f"the C kernel ended its process (exit code {code}) ({what})")
        raise KernelFailed(
            "crashed", f"the C kernel's process was killed by signal {signal.Signals(-code).name} ({what})"
        )

    def _grow(self, nbytes):
        size = max(nbytes, 2 * self.size, 1 << 20)
        fd = os.memfd_create("kernel-arguments", os.MFD_CLOEXEC)
        os.ftruncate(fd, size)
        address = _libc.mmap(None, size, 3, 1, fd, 0)  # PROT_READ | PROT_WRITE, MAP_SHARED
        if address in (None, ctypes.c_void_p(-1).value):
            os.close(fd)
            raise MemoryError(f"ckernel: no {size} bytes for the kernel's arguments")
        request = _REQUEST.pack(_ARENA, 0, 0, 0, size, *([0] * (_MAX_INTS - 1)), *([0.0] * _MAX_FLOATS), *_NONE)
        try:
            self._send(request, "mapping the arguments", (fd,))
        except KernelFailed:
            _libc.munmap(address, size)
            os.close(fd)
            raise
        if self.arena:
            _libc.munmap(self.arena, self.size)
            os.close(self.fd)
        self.arena, self.size, self.fd = address, size, fd

    @staticmethod
    def _key(address):
        """Which memory a memfd-backed storage is, for the host: a pooled memfd is the same memory
        whatever its address here."""
        fd, _, pooled = wire.SHARED[address]
        return ("pool", fd) if pooled else ("input", address)

    def _map(self, addresses):
        """Have the host map these memfd-backed storages (those it has not yet); an input's mapping lasts
        until `release()`, a pooled memfd's until it is closed."""
        todo = []
        for address in addresses:
            key = self._key(address)
            if key not in self.ids and self.free_ids and len(todo) < _MAX_INTS:
                self.ids[key] = self.free_ids.pop()
                todo.append((key, address))
                if key[0] == "input":
                    self.transient.append(key)
        if todo:
            ids = [self.ids[key] for key, _ in todo] + [0] * (_MAX_INTS - len(todo))
            sizes = [wire.SHARED[a][1] for _, a in todo] + [0] * (_MAX_INTS - len(todo))
            request = _REQUEST.pack(_MAP, 0, 0, len(todo), *([0] * _MAX_INTS), *([0.0] * _MAX_FLOATS), *ids, *sizes)
            self._send(request, "mapping the arguments", [wire.SHARED[a][0] for _, a in todo])

    def _unmap(self, keys):
        for start in range(0, len(keys), _MAX_INTS):
            batch = [k for k in keys[start : start + _MAX_INTS] if k in self.ids]
            ids = [self.ids.pop(k) for k in batch]
            self.free_ids.extend(ids)
            ids += [0] * (_MAX_INTS - len(ids))
            request = _REQUEST.pack(
                _UNMAP, 0, 0, len(batch), *([0] * _MAX_INTS), *([0.0] * _MAX_FLOATS), *ids, *_NONE[:_MAX_INTS]
            )
            self._send(request, "unmapping the arguments")

    def preload(self, inputs):
        """Before a call: the host maps its inputs' memfds (outside the timed call)."""
        addresses = [t.untyped_storage().data_ptr() for t in inputs if isinstance(t, torch.Tensor)]
        self._map([a for a in addresses if a in wire.SHARED])

    def release(self):
        """After a call: the inputs' mappings go, and those of pooled memfds that were closed."""
        keys, self.transient = self.transient, []
        self._unmap(keys + [("pool", fd) for fd in wire.retired()])

    def call(self, name, args):
        index = self.functions.get(name)
        if index is None:
            raise AttributeError(f"ckernel: the compiled C source defines no function {name!r}")
        if wire.RETIRED:  # a pooled memfd closed (its number may come back as another)
            self._unmap([("pool", fd) for fd in wire.retired()])
        ints, floats, mask = [], [], 0
        spans: dict[int, list[int]] = {}  # storage -> [first byte, end] its arguments cover (copied)
        tensors = []
        for a in args:
            if isinstance(a, torch.Tensor):
                if a.device.type != "cpu":
                    raise ValueError("ckernel: tensors passed to a C kernel must be on the CPU")
                if not a.is_contiguous():
                    raise ValueError("ckernel: tensor is not contiguous; call .contiguous() before passing it")
                lo = a.data_ptr()
                hi = lo + a.numel() * a.element_size()
                key = a.untyped_storage().data_ptr()
                mask |= 1 << len(ints)
                tensors.append((len(ints), key, lo, hi))
                ints.append(0)
            elif isinstance(a, bool) or not isinstance(a, (int, float)):
                raise TypeError(f"ckernel: unsupported argument type {type(a).__name__} (tensor, int or float)")
            elif isinstance(a, int):
                ints.append(a)
            else:
                floats.append(a)
        if len(ints) > _MAX_INTS or len(floats) > _MAX_FLOATS:
            raise TypeError(
                f"ckernel: a C kernel takes at most {_MAX_INTS} tensors and integers and {_MAX_FLOATS} floats"
            )
        self._map({key for _, key, _, _ in tensors if key in wire.SHARED})
        mapped = {
            key: self.ids[self._key(key)]
            for _, key, _, _ in tensors
            if key in wire.SHARED and self._key(key) in self.ids
        }
        for _, key, lo, hi in tensors:
            if key not in mapped:
                span = spans.setdefault(key, [lo, hi])
                span[0], span[1] = min(span[0], lo), max(span[1], hi)
        offsets, end = {}, 0
        for key, (lo, hi) in spans.items():
            offsets[key] = end
            end += (hi - lo + _ALIGN - 1) // _ALIGN * _ALIGN
        if end > self.size:
            self._grow(end)
        for key, (lo, hi) in spans.items():
            ctypes.memmove(self.arena + offsets[key], lo, hi - lo)
        ids = [0] * _MAX_INTS
        for slot, key, lo, _ in tensors:
            if key in mapped:
                ids[slot], ints[slot] = mapped[key], lo - key
            else:
                ints[slot] = offsets[key] + lo - spans[key][0]
        ints += [0] * (_MAX_INTS - len(ints))
        floats += [0.0] * (_MAX_FLOATS - len(floats))
        if self.failure is not None:
            raise self.failure
        self._send(_REQUEST.pack(_CALL, index, mask, 0, *ints, *floats, *ids, *_NONE[:_MAX_INTS]), f"in {name}()")
        for key, (lo, hi) in spans.items():
            ctypes.memmove(lo, self.arena + offsets[key], hi - lo)


def open_library(binary, path, functions, threads, program, on_call, after=lambda: None, harness=None):
    """`load_c` for the library at `path`, and the kernel host `binary` that runs it (started now; its
    syscall filter is `program(its pid)`): `on_call()` runs before each call and `after()` after it; `harness` (a context
    manager) wraps the harness's own work in a call."""
    host = Host(binary, path, list(functions), threads, program)

    def caller(name):
        if name not in host.functions:
            raise AttributeError(f"ckernel: the compiled C source defines no function {name!r}")

        def call(*args):
            on_call()
            with torch._C.DisableTorchFunction(), harness():  # the harness's own conversions and copies
                host.call(name, args)
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

    return load_c, host
