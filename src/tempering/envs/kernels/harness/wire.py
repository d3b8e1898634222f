"""Messages and tensors between the harness's processes (read-only; provided by the harness).

A message is one JSON object on a SOCK_SEQPACKET socket; the tensors it carries travel as memfds
passed with it (SCM_RIGHTS), one per tensor, so nothing is copied through the socket:
- inputs (judge -> runner) are shared and writable: the runner's tensors are the memfd's pages, and
  the judge, which keeps its own pristine copy, sees directly whether the candidate wrote into them;
- outputs (runner -> judge) are copied once into a memfd that the sender seals against writing,
  shrinking and growing before it goes: the judge maps it read-only and checks the seals, so the
  bytes it compares cannot change under it. The copy reads every byte of the output, so a call's
  answer is complete only when all of its output exists;
- a message may also carry a plain descriptor (the candidate's syscall-filter listener).
Values that are not tensors (ints, floats, None, strings, nested lists/tuples) travel in the JSON.
"""

import fcntl
import json
import mmap
import os
import socket
import warnings
import weakref

import torch

MAX_FDS = 64
MAX_MESSAGE = 1 << 20
_SEALED = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW
_FIXED = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW

warnings.filterwarnings("ignore", message="The given buffer is not writable")


class PeerGone(Exception):
    """The other process closed its end (it exited or was killed)."""


def pair():
    """Two connected ends (judge side, runner side)."""
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)


def _memfd(nbytes: int, name: str) -> int:
    fd = os.memfd_create(name, os.MFD_ALLOW_SEALING | os.MFD_CLOEXEC)
    os.ftruncate(fd, nbytes)
    return fd


def _flat_bytes(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


class Spares:
    """Memfds made and mapped ahead, one per expected output size: an answer then only copies its output
    (the pages already exist), so what a timed call pays for its answer is the copy, not the memory."""

    def __init__(self, sizes=()):
        self.free: dict[int, list] = {}
        for nbytes in sizes:
            if nbytes > 0:
                fd = _memfd(nbytes, "tensor")
                mm = mmap.mmap(fd, nbytes, flags=_POPULATE)
                self.free.setdefault(nbytes, []).append((fd, mm))

    def take(self, nbytes: int):
        """A ready (fd, map) of `nbytes`, or a new memfd and map (None as its map)."""
        ready = self.free.get(nbytes)
        return ready.pop() if ready else (_memfd(nbytes, "tensor"), None)

    def close(self):
        for ready in self.free.values():
            for fd, mm in ready:
                mm.close()
                os.close(fd)
        self.free.clear()


_POPULATE = mmap.MAP_SHARED | mmap.MAP_POPULATE  # the pages made in one go, not one fault at a time

SHARED: dict[int, tuple[int, int, bool]] = {}
"""Tensors' memory in memfds, by address: (descriptor, bytes, pooled). A `c` kernel's host maps these
itself (ckernel.py) instead of having their bytes copied; an entry goes when its mapping does."""
_POOL: dict[int, list[int]] = {}  # memfds of shared_empty's tensors that are gone, by size: pages kept
_POOL_MAX = 4


def _share(mm, address: int, fd: int, nbytes: int, pooled: bool) -> None:
    SHARED[address] = (fd, nbytes, pooled)

    def gone():
        SHARED.pop(address, None)
        free = _POOL.setdefault(nbytes, []) if pooled else None
        if free is not None and len(free) < _POOL_MAX:
            free.append(fd)
            _USED.add(fd)
        else:
            os.close(fd)
            if pooled:
                RETIRED.append(fd)

    weakref.finalize(mm, gone)


_USED: set[int] = set()
"""Pooled memfds back in the pool since it was last scribbled (freed within a call: they hold its values)."""
RETIRED: list[int] = []
"""Pooled memfds closed since `retired()` was last asked (a kernel host unmaps what it mapped of them)."""


def retired() -> list[int]:
    out = RETIRED[:]
    del RETIRED[: len(out)]
    return out


FILLS: dict[int, bytes] = {}
"""This call's starting bytes for outputs of each size, from the judge: wrong at every element (see
verify._fill). A size it sent none for starts as all-ones bytes."""


def scribble_pool(fills=None) -> None:
    """Every pooled memfd (the next call's outputs) set to this call's fill for its size (`fills`: bytes
    by size, the judge's; all-ones bytes where none): a kernel that leaves part of its output unwritten,
    counting on the last call's values or on a fill it can predict, is wrong."""
    FILLS.clear()
    FILLS.update(fills or {})
    for nbytes, free in _POOL.items():
        for fd in free:
            _scribble(fd, nbytes)
    _USED.clear()


def _scribble(fd: int, nbytes: int) -> None:
    fill = FILLS.get(nbytes)
    with mmap.mmap(fd, nbytes) as mm:  # through a map: the system calls a candidate may make
        mm.write(fill if fill is not None and len(fill) == nbytes else b"\xff" * nbytes)


def _output_memfd(nbytes: int) -> int:
    fd = os.memfd_create("kernel-output", os.MFD_CLOEXEC)
    os.ftruncate(fd, nbytes)
    return fd


def reserve(sizes) -> None:
    """Pooled memfds made ahead for a call's expected output sizes, any size (scribbled with the pool,
    before the call): a forward's outputs start as all-ones bytes from the first call on, not as zeros."""
    need: dict[int, int] = {}
    for nbytes in sizes:
        if nbytes > 0:
            need[nbytes] = need.get(nbytes, 0) + 1
    for nbytes, count in need.items():
        free = _POOL.setdefault(nbytes, [])
        while len(free) < min(count, _POOL_MAX):
            free.append(_output_memfd(nbytes))


def pooled(nbytes: int) -> bool:
    """An output size of this candidate's (expected, or allocated before): served from the pool."""
    return nbytes in _POOL


def shared_empty(nbytes: int) -> torch.Tensor:
    """`nbytes` of memory in a memfd (a kernel host maps it once and keeps it), as a uint8 tensor. The
    memfd of one that is gone serves again: a forward allocates the same sizes every call. One that a
    call has not had scribbled before it (new, so zeros, or freed within this call) is scribbled now."""
    free = _POOL.get(nbytes) or []
    fresh = not free
    fd = _output_memfd(nbytes) if fresh else free.pop()
    if fresh or fd in _USED:
        _USED.discard(fd)
        _scribble(fd, nbytes)
    mm = mmap.mmap(fd, nbytes)
    t = torch.frombuffer(mm, dtype=torch.uint8, count=nbytes)
    _share(mm, t.data_ptr(), fd, nbytes, pooled=True)
    return t


def _encode(obj, fds: list, shared: bool, views: list, spares: "Spares | None" = None):
    if isinstance(obj, torch.Tensor):
        t = obj.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        nbytes = t.numel() * t.element_size()
        entry = {"t": len(fds), "dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape)}
        fd, mm = spares.take(nbytes) if spares is not None and not shared else (_memfd(nbytes, "tensor"), None)
        fds.append(fd)
        if nbytes and shared:  # the sender keeps its own view of the shared pages
            mm = mmap.mmap(fd, nbytes, flags=_POPULATE)
            view = torch.frombuffer(mm, dtype=torch.uint8, count=nbytes)
            view.copy_(_flat_bytes(t))
            views.append(view.view(t.dtype).view(t.shape))
        elif nbytes:
            with mm if mm is not None else mmap.mmap(fd, nbytes, flags=_POPULATE) as mm:
                view = torch.frombuffer(mm, dtype=torch.uint8, count=nbytes)
                view.copy_(_flat_bytes(t))
                del view
        elif shared:
            views.append(torch.empty(t.shape, dtype=t.dtype))
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, (_FIXED if shared else _SEALED) | fcntl.F_SEAL_SEAL)
        return entry
    if isinstance(obj, (list, tuple)):
        return {"list" if isinstance(obj, list) else "tuple": [_encode(x, fds, shared, views, spares) for x in obj]}
    if isinstance(obj, dict):
        return {"dict": {str(k): _encode(v, fds, shared, views, spares) for k, v in obj.items()}}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return {"v": obj}
    if isinstance(obj, torch.dtype):
        return {"dtype_value": str(obj).replace("torch.", "")}
    raise TypeError(f"cannot pass a {type(obj).__name__} between the harness's processes")


def _decode(entry, fds: list, writable: bool, expect_sealed: bool):
    if "t" in entry:
        k = entry["t"]
        if not isinstance(k, int) or not 0 <= k < len(fds):
            raise ValueError("tensor entry names no descriptor")
        dtype = getattr(torch, str(entry["dtype"]), None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"unknown dtype {entry['dtype']!r}")
        shape = [int(s) for s in entry["shape"]]
        numel = 1
        for s in shape:
            if s < 0:
                raise ValueError("negative size")
            numel *= s
        nbytes = numel * torch.empty((), dtype=dtype).element_size()
        fd = fds[k]
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
        if expect_sealed and (seals & _SEALED) != _SEALED:
            raise ValueError("an output arrived in a memfd that is not sealed against writing")
        if os.fstat(fd).st_size != nbytes:
            raise ValueError(f"tensor of {nbytes} bytes arrived in {os.fstat(fd).st_size} bytes")
        if nbytes == 0:
            return torch.empty(shape, dtype=dtype)
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
        flags = mmap.MAP_PRIVATE if writable and seals & fcntl.F_SEAL_WRITE else mmap.MAP_SHARED  # a private copy
        if writable:  # inputs: mapped now, so that a call does not pay the page faults
            flags |= mmap.MAP_POPULATE
        mm = mmap.mmap(fd, nbytes, flags=flags, prot=prot)
        t = torch.frombuffer(mm, dtype=torch.uint8, count=nbytes)
        if writable and flags & mmap.MAP_SHARED:
            _share(mm, t.data_ptr(), os.dup(fd), nbytes, pooled=False)
        return t.view(dtype).view(shape)
    if "list" in entry:
        return [_decode(x, fds, writable, expect_sealed) for x in entry["list"]]
    if "tuple" in entry:
        return tuple(_decode(x, fds, writable, expect_sealed) for x in entry["tuple"])
    if "dict" in entry:
        return {k: _decode(v, fds, writable, expect_sealed) for k, v in entry["dict"].items()}
    if "dtype_value" in entry:
        return getattr(torch, entry["dtype_value"])
    return entry["v"]


class Channel:
    """One end of a judge <-> runner connection. Every message answers the last one received: it carries
    that one's `token` as `reply_to`, so an answer sent before its request arrived cannot pass for it."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.last_token = None

    def send(
        self, msg: dict, tensors: dict | None = None, shared: bool = False, fd: int | None = None, spares=None
    ) -> list:
        """`msg` with `tensors` ({key: value with tensors}) encoded into it as memfds. Shared: the
        receiver may write into them, and the sender's views of the same pages come back (in order).
        `fd`: a descriptor passed along (the receiver gets its own copy as `msg["fd"]`). `spares`: memfds
        made ahead for the tensors (`Spares`)."""
        fds: list[int] = []
        views: list = []
        try:
            body = dict(msg)
            if self.last_token is not None and "reply_to" not in body:
                body["reply_to"] = self.last_token
            for key, value in (tensors or {}).items():
                body[key] = _encode(value, fds, shared, views, spares)
            if fd is not None:
                body["fd"] = len(fds)
                fds.append(os.dup(fd))
            data = json.dumps(body).encode()
            if len(data) > MAX_MESSAGE or len(fds) > MAX_FDS:
                raise ValueError("message too large for the harness's channel")
            try:
                socket.send_fds(self.sock, [data], fds) if fds else self.sock.send(data)
            except (BrokenPipeError, ConnectionResetError) as e:
                raise PeerGone(str(e)) from None
            return views
        finally:
            for fd in fds:
                os.close(fd)

    def recv(self, tensor_keys=(), writable: bool = False, sealed: bool = False) -> dict:
        """The next message, with the entries named in `tensor_keys` decoded into tensors."""
        try:
            data, fds, _flags, _addr = socket.recv_fds(self.sock, MAX_MESSAGE, MAX_FDS)
        except (ConnectionResetError, BrokenPipeError) as e:
            raise PeerGone(str(e)) from None
        try:
            if not data:
                raise PeerGone("the other process closed the channel")
            msg = json.loads(data)
            if not isinstance(msg, dict):
                raise ValueError("a message is a JSON object")
            self.last_token = msg.get("token")
            for key in tensor_keys:
                if key in msg:
                    msg[key] = _decode(msg[key], fds, writable, sealed)
            if isinstance(msg.get("fd"), int) and 0 <= msg["fd"] < len(fds):
                msg["fd"] = os.dup(fds[msg["fd"]])
            else:
                msg.pop("fd", None)
            return msg
        finally:
            for fd in fds:
                os.close(fd)
