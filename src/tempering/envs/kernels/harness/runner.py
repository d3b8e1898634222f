"""The candidate's process and the reference runner (read-only; provided by the harness).

`candidate_main` runs in a process that the judge (verify.py) forks before it has drawn any secret or
loaded the problem: the submission is imported, built and called here, and nowhere else. What this
process reports is evidence, not the verdict: the judge computes the reference in its own process,
compares the outputs that come back as sealed copies, and times every call with its own clock.

Before the first line of the submission runs, this process:
- keeps only its channel to the judge (every other descriptor is closed; stdin is /dev/null; stdout
  and stderr go to files of its own);
- starts the thread teams it is allowed, then can start no process or thread at all (RLIMIT_NPROC 0)
  and create no POSIX message queue;
- only then opens the compiled kernel itself (the submission's `load_c` is a closure over it; the call
  counter is another closure, out of the submission's reach);
- gives the submission's module its own builtins (`policy.BUILTINS`; the rest are stubs that refuse)
  and an `__import__` that applies `policy.MODULES` to the module and to every imported name, handing
  out proxies that give allowed names only;
- runs an audit hook that refuses, while submission code runs, opening files, starting processes,
  walking the garbage collector or frames, and loading or probing native code;
- snapshots torch's, the harness's and builtins' attribute tables, compared after every phase;
- resets every signal handler the kernel's load-time code may have set, and installs the syscall
  filter of syscalls.py on all its threads (its listener goes to the judge).
The import runs under the same torch-call ban as `forward`: a TorchFunctionMode that lets through
allocation, metadata, views and copies only (compiled code is held to the same by the symbols it may
link, elf.py). There is no other mode, and every call is served the same way, correctness trial or
timed: fresh inputs in fresh memfds, a cache flush, the call, and the whole output copied out before
the answer. After every kernel call and every forward, torch's dispatch state (torch-function modes,
dispatch keys, grad mode) must be as it was. `ModelNew(...)` (its `__init__`, loading the reference's
weights) runs under the same ban, widened by what building a model needs (`policy.INIT_CALLS`:
allocating, filling with random or constant values, copying), so torch computes nothing for the
submission outside its forward either.
"""

import builtins
import contextlib
import ctypes
import math
import os
import resource
import sys
import traceback
import types
import weakref

import ckernel
import policy
import syscalls
import torch
import wire
from torch.overrides import TorchFunctionMode

ALLOWED_CALLS = policy.ALLOWED_CALLS
ALLOWED_OPS = policy.ALLOWED_OPS | policy.ALLOCATION_OPS
INIT_CALLS = policy.INIT_CALLS
EXTENSION_BACKENDS = ("torch_ext", "cuda")
COUNTED_BACKENDS = ("c", "torch_ext", "cuda", "triton")
BLOCKED_EVENTS = (
    "open",
    "os.",
    "subprocess.",
    "pty.",
    "socket.",
    "ctypes.dlopen",
    "ctypes.dlsym",
    "ctypes.addressof",
    "ctypes.string_at",
    "ctypes.wstring_at",
    "ctypes.cdata",
    "gc.",
    "sys._getframe",
    "sys._current_frames",
    "sys.settrace",
    "sys.setprofile",
    "sys.addaudithook",
    "object.__getattr__",
    "object.__setattr__",
    "object.__delattr__",
    "function.__new__",
    "code.__new__",
    "mmap.",
    "resource.",
    "signal.",
    "shutil.",
    "tempfile.",
)
"""Audit events refused while submission code runs (prefixes). Reading the Python installation's own
files is let through (`open` for reading under sys.prefix: torch imports some of its modules on first
use); a submission's own imports go through its checked `__import__` instead."""
_INSTALL = tuple(
    {
        os.path.realpath(p) + os.sep
        for p in (sys.prefix, sys.base_prefix, os.path.dirname(os.path.dirname(torch.__file__)))
    }
)


_TORCH_DIR = os.path.dirname(os.path.realpath(torch.__file__)) + os.sep


def _importing():
    """Whether an import is running: a module of the installation loading on first use (a submission's
    own imports only reach allowed modules, all imported before it runs)."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib._bootstrap"):
            return True
        frame = frame.f_back
    return False


def _lazy_read(event, args):
    """An `open` of a file of the Python installation for reading (a lazy import inside torch)."""
    if event != "open" or not args or not isinstance(args[0], str):
        return False
    mode, flags = (args[1] if len(args) > 1 else "r"), (args[2] if len(args) > 2 else 0)
    writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (flags or 0) & (os.O_WRONLY | os.O_RDWR)
    return not writing and os.path.realpath(args[0]).startswith(_INSTALL)


def warm_imports():
    """Import now what a candidate's process would import on first use: the dispatch mode's machinery
    (torch._dynamo, seconds) and the allowed modules. A warm worker calls this once for all its
    candidates; a candidate's process calls it before the submission runs."""
    import importlib

    with _BanCalls(None):
        torch.empty(1).fill_(0.0)
    _dispatch_state()
    for name in policy.MODULES:
        if name != "ckernel":
            try:
                importlib.import_module(name)
            except ImportError:
                pass


class Refused(Exception):
    """A report to the judge: this candidate ends with `status`."""

    def __init__(self, status, message, **extra):
        super().__init__(message)
        self.status, self.message, self.extra = status, message, extra


class Guard:
    """Records forbidden operations seen during candidate code, even if the candidate swallows them."""

    def __init__(self, allowed_calls, active):
        self.allowed_calls = allowed_calls
        self.active = active  # the audit hook's switch (our own frame walk must not trip it)
        self.violations = []
        self.trusted = ()  # file prefixes whose torch calls are not the submission's (Triton's runtime)

    def trusted_caller(self):
        """The torch call comes straight from trusted library code (Triton's interpreter), not from the
        submission: its kernel's body, run by that interpreter, is still held to the ban."""
        if not self.trusted:
            return False
        was, self.active[0] = self.active[0], False
        try:
            frame = sys._getframe(2)  # past trusted_caller and __torch_function__: torch's own frames, then the caller
            while frame is not None and frame.f_code.co_filename.startswith(_TORCH_DIR):
                frame = frame.f_back
            return frame is not None and frame.f_code.co_filename.startswith(self.trusted)
        finally:
            self.active[0] = was

    def flag(self, what):
        self.violations.append(what)
        raise RuntimeError(f"not allowed in a submission: {what}")


_NAMES: dict = {}


SHARED_ALLOCATIONS = frozenset(
    {"empty", "empty_like", "new_empty", "zeros", "zeros_like", "new_zeros", "ones", "ones_like", "new_ones"}
    | {"full", "full_like", "new_full"}
)
"""What a forward allocates its outputs with: for a `c` kernel, made in memfds its kernel host maps."""
SHARED_MIN_BYTES = 1 << 16
"""Smaller tensors are copied to the kernel host and back (cheaper than a memfd each)."""


class _BanCalls(TorchFunctionMode):
    def __init__(self, guard, extra=frozenset(), allocate=None):
        super().__init__()
        self.guard = guard
        self.extra = extra  # what building the model may call besides (policy.INIT_CALLS)
        self.allocate = allocate  # moves a new tensor into memory a kernel host maps (or None)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if self.guard is not None:
            name = _NAMES.get(func)
            if name is None:  # aten overloads: `empty_like.default`
                name = _NAMES[func] = getattr(func, "__name__", str(func)).split(".")[0]
            if name not in self.guard.allowed_calls and name not in self.extra and not self.guard.trusted_caller():
                self.guard.flag(f"torch call {name}")
            if self.allocate is not None and name in SHARED_ALLOCATIONS and not (kwargs and "out" in kwargs):
                return self.allocate(func(*args, **(kwargs or {})), name)
        return func(*args, **(kwargs or {}))


def _dispatch_state():
    """What decides which torch code runs for a call: torch-function modes, dispatch keys, grad mode.
    A kernel call that changes it could let plain torch run afterwards unseen."""
    C = torch._C
    return (
        C._is_torch_function_enabled(),
        C._is_torch_function_mode_enabled(),
        C._len_torch_function_stack(),
        C._len_torch_dispatch_stack(),
        C._dispatch_tls_local_include_set(),
        C._dispatch_tls_local_exclude_set(),
        torch.is_grad_enabled(),
        torch.is_inference_mode_enabled(),
    )


_HANDLED = frozenset({signal_number for signal_number in range(1, 65)} - {9, 19})  # all but SIGKILL, SIGSTOP


def _default_signals():
    """Every signal back to its default action, but those Python keeps (SIGINT, SIGPIPE, SIGXFSZ): a
    handler the kernel's load-time code set (a fault handler that computes output pages on first read,
    a timer's) is gone before the filter forbids setting new ones."""
    import signal

    kept = {signal.SIGINT, signal.SIGPIPE, signal.SIGXFSZ}
    for sig in sorted(_HANDLED - kept):
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError, RuntimeError):  # numbers the C library reserves
            pass


def _backed(outs, inputs, aliasing):  # aliasing: per output, whether the reference's shares memory
    """Why an output is not ordinary memory of this call ('' if it is): it must lie in private,
    readable and writable mappings, and (unless the reference does so too) not share memory with an
    input or an earlier call's output."""
    spans = []
    with open("/proc/self/maps", "rb") as f:
        for line in f.read().splitlines():
            head, _, rest = line.partition(b" ")
            start, _, end = head.partition(b"-")
            spans.append((int(start, 16), int(end, 16), rest[:4]))
    for k, o in enumerate(outs):
        aliased = k < len(aliasing) and aliasing[k]
        nbytes = o.untyped_storage().nbytes()
        if not nbytes:
            continue
        if not aliased and any(isinstance(t, torch.Tensor) and t.numel() and _overlap(o, t) for t in inputs):
            return f"output {k} shares memory with an input: return a new tensor"
        lo = o.untyped_storage().data_ptr()
        hi, at = lo + nbytes, lo
        for start, end, perms in spans:
            if start <= at < end:
                if not (perms.startswith(b"rw") and (perms.endswith(b"p") or aliased or _own(lo))):
                    return f"output {k} lies in memory mapped {perms.decode()} (it must be ordinary private memory)"
                at = end
                if at >= hi:
                    break
        if at < hi:
            return f"output {k} is not fully backed by mapped memory"
    return ""


def _own(address):
    """Memory the harness allocated for a forward's output in a memfd its kernel host maps."""
    return wire.SHARED.get(address, (0, 0, False))[2]


def _overlap(a, b):
    sa, sb = a.untyped_storage(), b.untyped_storage()
    return sa.data_ptr() < sb.data_ptr() + sb.nbytes() and sb.data_ptr() < sa.data_ptr() + sa.nbytes()


def held(model):
    """Every tensor `model` holds, by name: parameters and buffers, persistent or not (state_dict leaves
    out non-persistent buffers, and the judge re-draws those too)."""
    return {**dict(model.named_parameters()), **dict(model.named_buffers())}


def assign(model, state):
    """`state`'s values copied in place into `model`'s tensors of the same names (persistent or not)."""
    tensors = held(model)
    with torch.no_grad():
        for k, v in state.items():
            if k in tensors:
                tensors[k].copy_(v)


def _weights(live, state):
    """For each of the reference's floating tensors, ModelNew's tensor that holds it: the one of the
    same name and shape, else one of another name whose seeded values are the same (KernelBench's
    convention: the same parameters created in the same order). The judge re-draws these in place
    before timed calls."""
    found, taken = {}, set()
    for k, v in state.items():
        mine = live.get(k)
        if mine is not None and tuple(mine.shape) == tuple(v.shape):
            found[k] = mine
            taken.add(k)
    for k, v in state.items():
        if k in found or not v.is_floating_point():
            continue
        for name, mine in live.items():
            if (
                name not in taken
                and mine.shape == v.shape
                and mine.dtype == v.dtype
                and torch.equal(mine.detach().cpu(), v)
            ):
                found[k] = mine
                taken.add(name)
                break
    return found


def _isolate(sock_fd: int, prefix: str) -> None:
    """Only the channel stays open; stdin is /dev/null, stdout and stderr files of our own."""
    devnull = os.open("/dev/null", os.O_RDONLY)
    out = os.open(f"{prefix}.out", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    err = os.open(f"{prefix}.err", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    for src, dst in ((devnull, 0), (out, 1), (err, 2)):
        os.dup2(src, dst)
    top = os.sysconf("SC_OPEN_MAX")
    os.closerange(3, sock_fd)
    os.closerange(sock_fd + 1, top)
    sys.stdin = open(0, closefd=False)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)


def _snapshot(objects):
    return {name: {k: id(v) for k, v in vars(obj).items()} for name, obj in objects.items()}


def _changed(before, objects):
    for name, obj in objects.items():
        now = {k: id(v) for k, v in vars(obj).items()}
        if now != before[name]:
            keys = sorted(set(now) ^ set(before[name]) | {k for k in now if before[name].get(k) != now[k]})
            return f"{name}.{keys[0] if keys else '?'}"
    return None


class _Candidate:
    """Everything the candidate's process does, in order; each step answers the judge."""

    def __init__(self, chan, cfg):
        self.chan, self.cfg = chan, cfg
        self.device = cfg.get("device", "cpu")
        self.backend = cfg.get("backend")
        self.active = [False]
        self.guard = Guard(ALLOWED_CALLS | set(cfg.get("allow_ops", [])), self.active)
        self.calls = [0]
        self.model = None
        self.inputs = None
        self.previous = []  # weak references to the last call's outputs: the next call's must be new memory
        self.aliasing: list = []  # per output: the reference's shares memory with inputs or earlier outputs
        self.state = None  # torch's dispatch state inside a forward, as the harness set it
        self.listener = None
        self.host = None  # the kernel host of a `c` kernel (ckernel.Host)
        self.flush = None

    # -- set-up, before any candidate code ---------------------------------------------------------
    def prepare(self):
        cfg = self.cfg
        threads = int(cfg.get("threads", 1))
        torch.set_num_threads(threads)
        torch.ones(1 << 18).mul_(2.0)  # torch's own thread pool, started now
        calls = self.calls

        def count():
            calls[0] += 1

        def after():  # a kernel call must leave torch's dispatch state as it found it
            if self.state is not None and _dispatch_state() != self.state:
                self.guard.violations.append("a kernel call changed torch's dispatch state")
                raise Refused(
                    "tampering",
                    "a kernel call changed torch's dispatch state (torch-function modes, dispatch keys or grad "
                    "mode): a kernel computes, it does not switch torch's checks off",
                )

        warm_imports()
        self.load_c = None
        self.host = None
        if self.backend == "c" and cfg.get("library"):  # its own process, started before threads are refused
            self.load_c, self.host = ckernel.open_library(
                cfg["host"],
                cfg["library"],
                cfg.get("functions", []),
                threads,
                syscalls.host_program,
                count,
                after,
                self._harness_work,
            )
        # from here on no process or thread can start (Triton on a GPU runs its assembler as a process)
        limits = [resource.RLIMIT_MSGQUEUE]
        if not (self.backend == "triton" and self.device == "cuda"):
            limits.append(resource.RLIMIT_NPROC)
        for limit in limits:
            resource.setrlimit(limit, (0, 0))
        # an extension is loaded after that: its load-time code is held to it too
        self.dispatch_guard = self._dispatch_guard()
        self.load_inline = self._extension_loader(count, after)
        if self.backend == "triton":
            self._triton_hook(count)
        self.builtins = self._builtins()
        self.proxies = {}
        self.guarded = {
            "torch": torch,
            "torch.Tensor": torch.Tensor,
            "torch.nn.Module": torch.nn.Module,
            "torch.nn.functional": torch.nn.functional,
            "torch.nn.init": torch.nn.init,
            "builtins": builtins,
            "math": math,
            "ckernel": ckernel,
            "policy": policy,
            "wire": wire,
            "runner": sys.modules[__name__],
        }
        self.snapshot = _snapshot(self.guarded)
        self._audit()
        # the kernel is loaded: from here on its process may ask the kernel only what a kernel needs
        # (a Triton kernel on a GPU is compiled, assembled and loaded on its first launch)
        if not (self.backend == "triton" and self.device == "cuda"):
            _default_signals()
            self.listener = syscalls.install(self.host.pid if self.host is not None else None)

    def _shared(self, out, name):
        """A new tensor of the forward, in a memfd the kernel host maps: its bytes need no copy."""
        if type(out) is not torch.Tensor or out.device.type != "cpu" or not out.is_contiguous() or out.requires_grad:
            return out
        nbytes = out.numel() * out.element_size()
        if nbytes < SHARED_MIN_BYTES and not wire.pooled(nbytes):
            if name.startswith(("empty", "new_empty")):  # malloc's memory may hold zeros or an old output
                with self._harness_work():
                    out.reshape(-1).view(torch.uint8).fill_(255)
            return out
        with self._harness_work():
            t = wire.shared_empty(nbytes).view(out.dtype).view(out.shape)
            if not name.startswith(("empty", "new_empty")):
                t.copy_(out)
        return t

    @contextlib.contextmanager
    def _harness_work(self):
        """The harness's own work inside a kernel call (copying the arguments): not the submission's."""
        was, self.active[0] = self.active[0], False
        try:
            yield
        finally:
            self.active[0] = was

    def _dispatch_guard(self):
        """torch_ext, cuda: the dispatcher-level ban (harness/dispatch_guard.cpp) an extension call runs
        under, and the two Python switches that would turn it off from within a call removed."""
        path = self.cfg.get("guard")
        if self.backend not in EXTENSION_BACKENDS or not path:
            return None
        import ctypes

        lib = ctypes.CDLL(os.path.abspath(path))
        names = ALLOWED_OPS | set(self.cfg.get("allow_ops", []))
        lib.guard_install("\n".join(sorted(names)).encode())
        for module in (torch._C._autograd, torch.autograd):
            for name in ("_enable_record_function", "_clear_callbacks"):
                if hasattr(module, name):
                    delattr(module, name)
        buffer = ctypes.create_string_buffer(256)

        def refused():
            """The first op the call ran that an extension may not, or why the ban no longer holds."""
            if not lib.guard_intact():
                return "a call that switched torch's record-function callbacks off"
            if lib.guard_take(buffer, len(buffer)):
                return f"the torch op {buffer.value.decode(errors='replace')} inside an extension call"
            return ""

        return lib.guard_arm, refused

    def _extension_loader(self, count, after):
        """torch_ext, cuda: `load_inline` returns the extension the build job compiled, its calls counted."""
        prebuilt = self.cfg.get("extension")
        module = None
        if self.backend in EXTENSION_BACKENDS and prebuilt and os.path.exists(prebuilt):
            import importlib.util

            names = self.cfg.get("functions") or ["candidate_extension"]  # the module it was built as
            spec = importlib.util.spec_from_file_location(names[0], prebuilt)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)

        guard, harness, violations = self.dispatch_guard, self._harness_work, self.guard.violations

        def load_inline(name, *args, **kwargs):
            if module is None:
                raise RuntimeError("no prebuilt extension was provided for load_inline")

            class Extension:
                __slots__ = ()

                def __getattr__(self, attr):
                    if attr.startswith("_"):
                        raise AttributeError(attr)
                    fn = getattr(module, attr)
                    if not callable(fn):
                        return fn

                    def call(*a, **k):
                        count()
                        if guard is None:
                            out = fn(*a, **k)
                        else:
                            with harness():
                                guard[0](1)
                            try:
                                out = fn(*a, **k)
                            finally:
                                with harness():
                                    guard[0](0)
                                    why = guard[1]()
                            if why:
                                violations.append(why)
                                raise Refused(
                                    "forbidden_op",
                                    f"{why}: an extension computes with its own code; from torch it may only "
                                    "allocate, view and copy tensors",
                                )
                        after()
                        return out

                    return call

            return Extension()

        return load_inline

    def _triton_hook(self, count):
        """triton: count kernel launches. The torch-call ban stays on while a kernel runs; the torch calls
        Triton's own runtime makes (the interpreter's copies) are told apart by where they come from."""
        try:
            import triton
            import triton.runtime.interpreter as interp
            import triton.runtime.jit as jit
        except ImportError:  # no Triton here: nothing of it to guard
            return
        self.guard.trusted = (os.path.dirname(os.path.realpath(triton.__file__)) + os.sep,)
        for cls in (getattr(interp, "InterpretedFunction", None), getattr(jit, "JITFunction", None)):
            if cls is None or not hasattr(cls, "run"):
                continue
            original = cls.run

            def run(self, *args, _original=original, **kwargs):
                count()
                return _original(self, *args, **kwargs)

            cls.run = run

    def _builtins(self):
        guard = self.guard
        table = {name: getattr(builtins, name) for name in policy.BUILTINS}
        for name in dir(builtins):
            if name in table or name.startswith("__"):
                continue

            def refuse(*args, _name=name, **kwargs):
                guard.violations.append(f"the builtin {_name}")
                raise RuntimeError(f"{_name} is not available to a submission")

            table[name] = refuse
        table["__build_class__"] = builtins.__build_class__
        table["__import__"] = self._import
        table["__name__"] = "builtins"
        return table

    def _proxy(self, modname):
        if modname in self.proxies:
            return self.proxies[modname]
        guard = self.guard
        overrides = {}
        if modname == "ckernel":
            real = None
            overrides["load_c"] = self.load_c or _no_library
        elif modname == "torch.utils.cpp_extension":
            import torch.utils.cpp_extension as real

            overrides["load_inline"] = self.load_inline
        else:
            import importlib

            real = importlib.import_module(modname)
        proxy_of = self._proxy

        def getattr_(self_, name):
            if name in overrides:
                return overrides[name]
            missing = object()
            value = getattr(real, name, missing) if real is not None else missing
            why = policy.refusal(modname, name, value, known=value is not missing)
            if why:
                guard.violations.append(why)
                raise AttributeError(why)
            if value is missing:
                raise AttributeError(f"module {modname} has no attribute {name!r}")
            sub = policy.module_name(modname, name, value)
            return proxy_of(sub) if sub else value

        def setattr_(self_, name, value):
            guard.violations.append(f"assigning {modname}.{name}")
            raise AttributeError(f"{modname}.{name} cannot be assigned from a submission")

        cls = type(modname, (), {"__slots__": (), "__getattr__": getattr_, "__setattr__": setattr_})
        self.proxies[modname] = proxy = cls()
        return proxy

    def _import(self, name, globals=None, locals=None, fromlist=(), level=0):
        guard = self.guard
        if level != 0:
            guard.violations.append(f"a relative import ({name})")
            raise ImportError("relative imports are not allowed in a submission")
        parts = name.split(".")
        for k in range(1, len(parts) + 1):
            prefix = ".".join(parts[:k])
            if prefix not in policy.MODULES:
                why = f"import of {prefix!r} is not allowed (allowed: {', '.join(sorted(policy.MODULES))})"
                guard.violations.append(why)
                raise ImportError(why)
        for item in fromlist or ():
            if item == "*":
                guard.violations.append(f"from {name} import *")
                raise ImportError("star imports are not allowed in a submission")
        return self._proxy(name if fromlist else parts[0])

    def _audit(self):
        active, guard = self.active, self.guard

        def hook(event, args):
            if active[0] and event.startswith(BLOCKED_EVENTS) and not _lazy_read(event, args):
                active[0] = False  # what follows must not re-enter
                try:
                    if _importing():  # torch importing one of its modules on first use
                        return
                    guard.violations.append(f"{event} (audit event)")
                finally:
                    active[0] = True
                raise RuntimeError(f"{event} is not allowed in a submission")

        sys.addaudithook(hook)

    def _tampered(self, when):
        what = _changed(self.snapshot, self.guarded)
        if what:
            raise Refused("tampering", f"{what} was replaced or added during {when}")

    def _violated(self, when):
        if self.guard.violations:
            raise Refused("forbidden_op", f"{self.guard.violations[0]} ({when})")

    # -- candidate code ---------------------------------------------------------------------------
    def _run_candidate(self, fn, ban, when, extra=frozenset(), allocate=None):
        """fn() as candidate code: audit hook on, and the torch ban if `ban` (widened by `extra`)."""
        self.active[0] = True
        try:
            if ban:
                with torch.no_grad(), _BanCalls(self.guard, extra, allocate):
                    return fn()
            return fn()
        except SystemExit:
            self.active[0] = False
            raise Refused("early_exit", f"the submission tried to exit the process ({when})") from None
        except Refused:
            raise
        except BaseException as e:
            self.active[0] = False
            if self.host is not None and self.host.failure is not None:  # the kernel's process ended
                raise Refused(self.host.failure.status, f"{self.host.failure.message} ({when})") from None
            if self.guard.violations:
                raise Refused("forbidden_op", f"{self.guard.violations[0]} ({when})") from None
            raise Refused(
                "runtime_error", f"{when} raised {type(e).__name__}: {e}", traceback=traceback.format_exc(limit=-3)
            ) from None
        finally:
            self.active[0] = False

    def load(self):
        with open(self.cfg["submission"]) as f:
            source = f.read()
        module = types.ModuleType("candidate_submission")
        module.__dict__["__builtins__"] = self.builtins
        module.__dict__["__file__"] = "model_new.py"
        try:
            code = compile(source, "model_new.py", "exec")
        except SyntaxError as e:
            raise Refused("bad_submission", f"syntax error on line {e.lineno}: {e.msg}") from None
        self._run_candidate(lambda: exec(code, module.__dict__), True, "while the submission was imported")
        self._violated("while the submission was imported")
        self._tampered("the import of the submission")
        cls = module.__dict__.get("ModelNew")
        if not isinstance(cls, type):
            raise Refused("bad_submission", "the submission defines no class ModelNew")
        self.module = module
        self._special_methods("the import of the submission")
        self.cls = cls

    def _special_methods(self, when):
        """The submission's classes define no special method but `__init__`, however it was bound."""
        for value in list(self.module.__dict__.values()):
            if not isinstance(value, type) or value.__module__ != "candidate_submission":
                continue
            for key in vars(value):
                if key.startswith("__") and key.endswith("__") and key not in _CLASS_DUNDERS:
                    raise Refused(
                        "forbidden_op",
                        f"class {value.__name__} defines {key} ({when}): special methods other than __init__ "
                        "run at moments the harness does not choose",
                    )

    def build(self, init, state, init_seed):
        def make():
            model = self.cls(*init)
            mine = held(model)
            shared = {k: v for k, v in state.items() if k in mine and tuple(mine[k].shape) == tuple(v.shape)}
            assign(model, shared)
            model = model.to(self.device).eval()
            return model, sorted(mine), sorted(shared), held(model)

        torch.manual_seed(init_seed)  # the reference's seed (here: its state before any candidate code)
        model, names, shared, live = self._run_candidate(make, True, "ModelNew(*get_init_inputs())", INIT_CALLS)
        with self._harness_work():
            self.weights = _weights(live, state)
        self._violated(
            "in ModelNew(): building the model may allocate, fill parameters with random or constant values and "
            "copy, not compute (tensors named and shaped as Model's get its values anyway); compute in the kernel"
        )
        self._tampered("ModelNew()")
        self._special_methods("ModelNew()")
        self.model = model
        return {"names": names, "shared": shared}

    def call(self, inputs):
        """One forward on fresh inputs, run the same way whatever the judge does with its answer."""
        before = self.calls[0]

        def forward():
            self.state = _dispatch_state()  # each kernel call is checked against it
            try:
                return self.model(*inputs)
            finally:
                self.state = None

        out = self._run_candidate(forward, True, "the forward", allocate=self._shared if self.host else None)
        if self.host is not None and self.host.failure is not None:  # even if the forward swallowed it
            raise Refused(self.host.failure.status, f"{self.host.failure.message} (the forward)")
        if self.device == "cuda":
            torch.cuda.synchronize()
        self._violated("in the forward; only allocate outputs, take views and call your kernel")
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        for k, o in enumerate(outs):
            if type(o) is not torch.Tensor:
                raise Refused("bad_output", f"output {k} is a {type(o).__name__}, not a plain torch.Tensor")
            if o.layout != torch.strided or o.device.type != self.device or o.is_meta:
                raise Refused("bad_output", f"output {k} is not a materialised {self.device} tensor")
            aliased = k < len(self.aliasing) and self.aliasing[k]
            if not aliased and any(p() is not None and _overlap(o, p()) for p in self.previous):
                raise Refused(
                    "bad_output",
                    f"output {k} is the memory of an earlier call's output: every call returns a new tensor",
                )
        if self.backend in COUNTED_BACKENDS and self.calls[0] == before:
            raise Refused(
                "kernel_not_called",
                "the forward never called the compiled kernel (a kernel that is defined but not launched does not count)",
            )
        return outs, self.calls[0] - before

    # -- the judge's requests ------------------------------------------------------------------------
    def serve(self):
        chan = self.chan
        try:
            chan.send(
                {
                    "op": "prepared",
                    "ok": True,
                    "filter": "listener" if self.listener is not None else "kill",
                    "kernel_host": self.host.pid if self.host is not None else None,
                },
                fd=self.listener,
            )
            if self.listener is not None:
                os.close(self.listener)
                self.listener = None
            self.load()
            chan.send({"op": "imported", "ok": True})
            outs: list = []
            while True:
                msg = chan.recv(("init", "state", "inputs", "fills"), writable=True)
                op = msg.get("op")
                if op == "init":
                    chan.send({"op": "built", "ok": True, **self.build(msg["init"], msg["state"], msg["init_seed"])})
                elif op == "weights":  # fresh values in the tensors named as Model's, in place
                    with self._harness_work(), torch.no_grad():
                        for k, v in msg["state"].items():
                            if k in self.weights:
                                self.weights[k].copy_(v)
                    chan.send({"op": "weighted", "ok": True})
                elif op == "setup":
                    self.flush = torch.empty(int(msg["flush_mb"] * 2**20) // 4)
                    self.aliasing = [bool(a) for a in msg.get("aliasing", [])]
                    chan.send({"op": "ready", "ok": True})
                elif op == "inputs":
                    self.inputs, spares = _load(chan, msg, self.flush, self.device, self.host)
                elif op == "go":
                    outs, calls = self.call(self.inputs)
                    _answer(chan, outs, calls, spares)
                elif op == "measured":  # the judge has read the call's CPU time: what follows is not in it
                    if self.host is not None:
                        with self._harness_work():
                            self.host.release()
                    why = _backed(outs, self.inputs, self.aliasing)
                    if why:
                        raise Refused("bad_output", why)
                    # weak: an earlier output the submission still holds is found; one it let go is freed,
                    # as eager's are, and the allocator may reuse its memory
                    self.previous, self.inputs, outs = [weakref.ref(o) for o in outs], None, []
                elif op == "finish":
                    self._tampered("the run")
                    self._special_methods("the run")
                    chan.send({"op": "finished", "ok": True})
                elif op == "end":
                    return 0
                else:
                    raise Refused("harness_error", f"unknown request {op!r}")
        except Refused as r:
            _report(chan, r.status, r.message, **r.extra)
        except wire.PeerGone:
            pass
        return 0


_CLASS_DUNDERS = frozenset(
    {"__module__", "__qualname__", "__doc__", "__init__", "__dict__", "__weakref__", "__annotations__"}
    | {"__firstlineno__", "__static_attributes__", "__classcell__", "__orig_bases__", "__parameters__"}
)
"""What Python itself puts in a class's namespace (and `__init__`)."""


def _load(chan, msg, flush, device, host=None):
    """A call's inputs (fresh tensors over fresh memfds, mapped now, and by the kernel host), memfds for the
    answer's expected output sizes, then a cache flush: all before the timed call."""
    inputs = [x.to(device) if isinstance(x, torch.Tensor) and device != "cpu" else x for x in msg["inputs"]]
    if host is not None:
        host.preload(inputs)
    spares = wire.Spares(int(n) for n in msg.get("expect", []))
    if host is not None:
        wire.reserve(int(n) for n in msg.get("expect", []))
    fills = {int(n): f.numpy().tobytes() for n, f in zip(msg.get("expect", []), msg.get("fills") or [])}
    wire.scribble_pool(fills)  # no output starts with the last call's values or a value it can count on
    if flush is not None:
        flush.fill_(float(msg.get("r", 0)))
    chan.send({"op": "loaded", "ok": True})
    return inputs, spares


def _answer(chan, outs, calls, spares):
    """The answer to a call: its whole output, copied into sealed memfds (every byte read) before it goes."""
    try:
        chan.send({"op": "done", "ok": True, "calls": calls}, {"outputs": outs}, spares=spares)
    finally:
        spares.close()


def _no_library():
    raise RuntimeError("no compiled C library for this submission")


def _report(chan, status, message, **extra):
    try:
        chan.send({"op": "refused", "ok": False, "status": status, "message": message, **extra})
    except wire.PeerGone:  # the judge is gone: nobody is left to tell, and it judges the silence itself
        pass


def candidate_main(sock, cfg) -> None:
    """In the forked candidate process: never returns."""
    code = 0
    try:
        # forked from the judge, which is not dumpable: this process is made traceable again (it holds
        # nothing secret) so that the judge can sample its threads (harness/ipsample.py)
        ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE = 1
        _isolate(sock.fileno(), "candidate")
        chan = wire.Channel(sock)
        runner = _Candidate(chan, cfg)
        try:
            runner.prepare()
        except Exception as e:
            _report(chan, "harness_error", f"the candidate's process could not be prepared: {type(e).__name__}: {e}")
            raise
        code = runner.serve()
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


# -- the reference runner (trusted: the problem's models only) ---------------------------------------
class NullModel:
    """Returns tensors shaped like the reference's outputs, computed once: the harness's own cost."""

    def __init__(self, outputs):
        self.outputs = [o.clone() for o in outputs]

    def __call__(self, *inputs):
        return self.outputs[0] if len(self.outputs) == 1 else tuple(self.outputs)


def _reference_models(cfg, state, base, compile_too):
    """The problem's Model with the judge's weights, a null model shaped like its outputs, torch.compile."""
    import importlib.util

    device = cfg.get("device", "cpu")
    spec = importlib.util.spec_from_file_location("reference_problem", cfg["problem"])
    problem = importlib.util.module_from_spec(spec)
    sys.modules["reference_problem"] = problem
    spec.loader.exec_module(problem)
    torch.manual_seed(cfg.get("init_seed", 42))
    model = problem.Model(*problem.get_init_inputs())
    assign(model, state)
    model = model.to(device).eval()
    with torch.no_grad():
        out = model(*base)
    models = {"eager": model, "null": NullModel(list(out) if isinstance(out, (tuple, list)) else [out])}
    if compile_too:
        models["compile"] = torch.compile(model)
    return models


def reference_main(sock, cfg) -> None:
    """In the reference process: time the trusted models with the candidate's protocol. The judge forks
    it before it has computed anything (a process forked after an OpenMP team ran can hang in its next
    parallel region), so it builds the models itself, with the weights the judge sends."""
    code = 0
    device = cfg.get("device", "cpu")
    try:
        _isolate(sock.fileno(), "reference")
        torch.set_num_threads(int(cfg.get("threads", 1)))
        chan = wire.Channel(sock)
        inputs: list | None = None
        flush: torch.Tensor | None = None
        models: dict = {}
        while True:
            msg = chan.recv(("inputs", "state"), writable=True)
            op = msg.get("op")
            if op == "time_setup":
                base = [x.to(device) if isinstance(x, torch.Tensor) and device != "cpu" else x for x in msg["inputs"]]
                flush = torch.empty(int(msg["flush_mb"] * 2**20) // 4)
                models = _reference_models(cfg, msg["state"], base, msg.get("compile", False))
                reply = {"op": "ready", "ok": True}
                if "compile" in models:
                    try:
                        with torch.no_grad():
                            models["compile"](*base)
                    except Exception as e:
                        models.pop("compile")
                        reply["compile_error"] = f"{type(e).__name__}: {str(e)[:300]}"
                chan.send(reply)
            elif op == "weights":
                assign(models["eager"], msg["state"])  # in place: torch.compile's model shares them
                chan.send({"op": "weighted", "ok": True})
            elif op == "inputs":
                inputs, spares = _load(chan, msg, flush, device)
            elif op == "go":
                assert inputs is not None  # the judge sends the inputs first
                model = models[msg["model"]]
                with torch.no_grad(), _BanCalls(None):  # the same mode entry as the candidate's call
                    out = model(*inputs)
                if device == "cuda":
                    torch.cuda.synchronize()
                _answer(chan, list(out) if isinstance(out, (tuple, list)) else [out], 0, spares)
                inputs = None
            elif op == "measured":
                pass
            elif op == "end":
                break
    except wire.PeerGone:
        pass
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        os._exit(code)
