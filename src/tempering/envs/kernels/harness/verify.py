"""The judge: verify and time one candidate against its reference (read-only; one sandboxed process tree).

Reads `config.json` and a nonce line on stdin; writes one line, the result (status, mismatch report,
timings) carrying the nonce, on its standard output. No object the submission can reach decides it:

  1. before the judge knows anything secret, or has even loaded the problem, it forks the candidate's
     process (runner.py), which imports and builds the submission and answers the judge's requests,
     and (to time the baselines) the reference process; the judge is not dumpable, so the candidate's
     process cannot read its memory;
  2. the judge loads the problem and builds the reference here, in a process the submission never ran
     in, under the same seed as the candidate's model (KernelBench's rule);
  3. only once the candidate is loaded and built does the judge draw a secret seed (`secrets`), from
     which every correctness input and every timing input of this evaluation comes: get_inputs()
     trials, signed inputs (KernelBench's torch.rand inputs are all in [0, 1), where returning the
     input passes ReLU), and an extra shape (a smaller batch) where the reference accepts one;
  4. inputs go to the candidate in shared memory; its outputs come back in sealed memfds and are
     compared here with the reference's; inputs must come back unchanged;
  5. timing: the candidate's process, and a reference process that runs eager PyTorch (and
     torch.compile) and a null model, answer the same request; the judge's clock measures each call
     from request to answer. Each timed call changes a few input values the judge picked after the
     previous call, so no earlier result fits it; the answer carries the output's bytes at positions
     the judge sends only once the call has returned, and a few calls chosen afterwards are fetched
     whole and checked against those bytes and the reference, so work done after the call returned
     shows. The null model's time is the fixed overhead: reported, and subtracted from both sides.
     Each call is measured twice: wall-clock, and the CPU time the kernel counted for the answering
     process and a `c` kernel's host (all their threads; /proc/PID/task/*/schedstat, read once none is
     on a CPU), which a loaded machine's scheduling delays do not inflate; `clock` says which one the
     result uses;
  6. the judge samples the instruction pointer of every thread of the candidate's process (and of a `c`
     kernel's host) during every call, with perf events it owns (ipsample.py), and refuses a kernel
     whose calls spent more than `library_share` of their non-harness time in library code
     (`library_compute`): what ran is judged, whatever route reached it;
  7. the candidate's process reports what it saw itself (forbidden torch calls, kernel calls, a
     replaced attribute): those checks are the second line, behind everything above.
"""

import copy
import ctypes
import importlib.util
import json
import math
import os
import random
import secrets
import select
import signal
import sys
import time
import traceback

import ipsample
import runner
import syscalls
import torch
import wire

_perf_counter = time.perf_counter
EPS32 = 2.0**-23
"""float32's machine epsilon: the relative size of one rounding of an input."""
VARIES = 1e-4
"""A reference output varies (for the near-constant rule) when its deviation is above this share of
its largest magnitude."""
SPECIAL_VALUES = ("nan", "inf", "-inf", "-inf_row", "neg_zero", "denormal")
"""What a problem's `special_values` may name: NaN, the infinities and a whole last-dimension row of -inf
(an empty softmax row, a maximum over nothing but -inf), -0.0, and denormals, at random positions."""
DEFAULT_SPECIAL = ("inf", "-inf", "-inf_row", "neg_zero", "denormal")
"""Required where a problem declares none and the reference is reproducible on them. Not NaN: C's
comparisons drop a NaN where torch's max, clamp and ReLU carry it, both documented IEEE conventions, so
NaN is required only where a problem names it; arithmetic on the others is IEEE in both."""
NUDGES = 2
"""Float64 runs of the reference on nudged inputs and weights per check that needs them (`Judge.float64`)."""
NOISE_FACTOR = 256.0
"""How many times the reference's own numerical noise an element may be off (`Judge.tolerance`): honest
float32 kernels that sum in another order stay far inside it; zeros or a cruder function do not."""
MEMORY_SIGNS = ("MemoryError", "std::bad_alloc", "Cannot allocate memory", "out of memory", "Could not allocate")


class Verdict(Exception):
    """Ends verification with a status (not `correct`) and a message for the feedback."""

    def __init__(self, status, message, **extra):
        super().__init__(message)
        self.status, self.message, self.extra = status, message, extra


def _load_module(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _clone(inputs, device):
    return [x.detach().clone().to(device) if isinstance(x, torch.Tensor) else x for x in inputs]


def _outputs(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _same_bytes(a, b):
    """Bit for bit the same tensor (compared in 8-byte words where they fit: several times faster)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    x, y = wire._flat_bytes(a), wire._flat_bytes(b)
    whole = x.numel() - x.numel() % 8
    if whole and x.storage_offset() % 8 == 0 and y.storage_offset() % 8 == 0:
        if not torch.equal(x[:whole].view(torch.int64), y[:whole].view(torch.int64)):
            return False
        x, y = x[whole:], y[whole:]
    return torch.equal(x, y)


# -- comparison (in the judge only) -------------------------------------------------------------------
def _norms(t):
    """(largest magnitude, RMS, mean) of `t` in float64, scaled by its largest magnitude first: squares of
    float32 values past 1.8e19 overflow float32 and those below 1e-23 vanish, so a check computed from
    them would depend on the outputs' scale."""
    t = t.detach().double()
    if not t.numel():
        return 0.0, 0.0, 0.0
    top = float(t.abs().max())
    if top == 0 or not math.isfinite(top):
        return top, (0.0 if top == 0 else top), 0.0
    t = t / top
    n = t.numel()
    return top, top * float(torch.linalg.vector_norm(t)) / math.sqrt(n), top * float(t.sum()) / n


def _mismatch(got, want, diff=None, allowed=None):
    """A report of where `got` is off: shapes/dtypes, or the elements whose |got - want| (`diff`, float64)
    is above `allowed` (per element; None: exact, as integer and bool outputs are), the largest error."""
    if got.shape != want.shape:
        return {"reason": f"shape {tuple(got.shape)} != expected {tuple(want.shape)}"}
    if got.dtype != want.dtype:
        return {"reason": f"dtype {got.dtype} != expected {want.dtype}"}
    g, w = got.detach().double().cpu(), want.detach().double().cpu()
    if not torch.equal(torch.isfinite(g), torch.isfinite(w)):
        return {"reason": "non-finite values where the reference is finite (or the reverse)"}
    if diff is None:
        diff = (g - w).abs()
    bad = (got != want).cpu() if allowed is None else diff > allowed.cpu()  # integers exactly, not via float64
    flat = int(diff.argmax())
    where = [int(i) for i in torch.unravel_index(torch.tensor(flat), diff.shape)] if diff.dim() else []
    zero = torch.zeros_like(w)
    rel = (diff / w.abs()).where(w != 0, zero)  # where the reference is 0, abs error only
    return {
        "reason": "values differ",
        "max_abs": float(diff.max()),
        "max_rel": float(rel.max()),
        "where": where,
        "expected": float(w.reshape(-1)[flat]),
        "got": float(g.reshape(-1)[flat]),
        "mismatched": int(bad.sum()),
        "total": int(bad.numel()),
    }


def _spread(t):
    """(largest magnitude, standard deviation, RMS) of a tensor, in float64 (see `_norms`); the deviation
    from the mean and the RMS (one pass less than torch.std; only ever compared at a factor of a thousand)."""
    top, rms, mean = _norms(t)
    n = max(1, t.numel())
    std = math.sqrt(max(rms * rms - mean * mean, 0.0) * n / max(1, n - 1)) if math.isfinite(rms) else rms
    return top, std, rms


def _degenerate(got, want_spread, numel, gap=None):
    """Near-constant or near-zero candidate output where the reference's (`want_spread`) is not.

    Every threshold is relative to the reference's own magnitude, so the verdict does not change when
    the problem's outputs are scaled by 1e-24 or 1e20. `gap`, a bound on |got - want| everywhere, can
    settle it without a pass over `got`: max|got| >= max|want| - gap, and std(got) >= std(want) -
    std(got - want) >= std(want) - gap * sqrt(n / (n - 1)); only when those bounds (with a wide margin
    for rounding) do not rule it out is `got` measured."""
    if numel < 2:
        return None
    w_scale, w_std, _ = want_spread
    varies = w_std > VARIES * w_scale
    if gap is not None:
        slack = 1.01 * gap * math.sqrt(numel / (numel - 1))
        if (w_scale == 0 or 0.99 * w_scale - slack > 1e-3 * w_scale) and (
            not varies or 0.99 * w_std - slack > 1e-3 * w_std
        ):
            return None
    g_scale, g_std, _ = _spread(got)
    if w_scale > 0 and g_scale <= 1e-3 * w_scale:
        return "near-zero output where the reference's is not"
    if varies and g_std <= 1e-3 * w_std:
        return "near-constant output where the reference's varies"
    return None


def _intermediate(out_rms, inputs):
    """The size of the values an honest kernel may round on the way to an element: the smaller of the
    output's RMS and the largest floating input's (log_softmax's x - logsumexp rounds at the inputs' size
    where the reference's output is almost 0; an output far smaller than its inputs is judged at its own
    size). Its rounding is in no element's sensitivity to the inputs."""
    sizes = [_norms(x)[1] for x in inputs if _is_float(x) and x.numel()]
    size = min(out_rms, max((v for v in sizes if math.isfinite(v)), default=out_rms))
    return max(size if math.isfinite(size) else 0.0, torch.finfo(torch.float64).tiny)


def _finite_or_one(x):
    return x if 0 < x < math.inf else 1.0


def _describe(report):
    where = f"{report.get('kind')} inputs{report.get('shape_note', '')}"
    if report.get("reason") != "values differ":
        return f"{report['reason']} (output {report.get('output', 0)}, {where})"
    return (
        f"output {report['output']} differs on {where}: {report['mismatched']}/{report['total']} elements "
        f"outside tolerance; max abs err {report['max_abs']:.3g}, max rel err {report['max_rel']:.3g}; at "
        f"{tuple(report['where'])} expected {report['expected']:.5g}, got {report['got']:.5g}"
    )


def _all_finite(t):
    """No inf or NaN in `t` (aminmax carries a NaN through)."""
    if not t.is_floating_point() or not t.numel():
        return True
    low, high = torch.aminmax(t)
    return math.isfinite(float(low)) and math.isfinite(float(high))


def _split_finite(got, want, any_for_nan=False):
    """(got, want, keep) where the reference's output holds inf or NaN: a report unless the candidate has
    the same non-finite values at the same positions (NaN for NaN, inf of the same sign), else both with
    those positions set to zero, so the finite elements are judged as usual; keep is None when all finite.
    `any_for_nan`: where the reference holds NaN, any value of the candidate's passes."""
    if not (want.is_floating_point() and got.is_floating_point()) or got.shape != want.shape or _all_finite(want):
        return got, want, None
    keep = torch.isfinite(want)
    judged = ~keep & ~want.isnan() if any_for_nan else ~keep
    kind = [t.where(judged, 0).nan_to_num(2.0, 1.0, -1.0) for t in (got, want)]  # NaN 2, inf +-1, rest 0
    if not torch.equal(kind[0], kind[1]):
        return None, None, {"reason": "inf or NaN where the reference's differs (position, kind or sign)"}
    zero = torch.zeros((), dtype=want.dtype, device=want.device)
    return got.where(keep, zero), want.where(keep, zero), keep


def _is_float(x):
    return isinstance(x, torch.Tensor) and x.is_floating_point()


def _low_precision(ratio, limit, what, dtype):
    name = str(dtype).removeprefix("torch.")
    return (
        f"errors look like lower-precision arithmetic: RMS error {ratio:.3g} times {what}, above {limit:g} "
        f"({name} arithmetic stays within it; arithmetic in a lower precision is far outside)"
    )


def _quantile(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def _fresh(v, gen):
    """New values for a floating tensor a model holds, drawn so the model stays valid: a tensor that is all
    positive (a variance, a scale) times log-normal noise, any other plus Gaussian noise the size of its
    own spread (of |mean| where it is constant, of 1 where it is all zero). Not a permutation: a constant
    or one-element tensor changes too. A mask (only 0s and 1s, both present) keeps its values: its
    pattern is the problem's, and a kernel may rely on it; non-finite elements stay as they are."""
    x = v.detach().cpu().double()
    finite = torch.isfinite(x)
    values = x[finite]
    if not values.numel():
        return v.detach().cpu().clone()
    if values.numel() < x.numel() or not bool(((values == 0) | (values == 1)).all()) or values.unique().numel() < 2:
        z = torch.randn(x.shape, generator=gen, dtype=torch.float64)
        if bool((values > 0).all()):
            new = x * torch.exp(0.5 * z)
        else:
            spread = float(values.std()) if values.numel() > 1 else 0.0
            new = x + (spread or abs(float(values.mean())) or 1.0) * z
        x = new.where(finite, x)
    return x.to(v.dtype)


def _wrong_everywhere(group, gen):
    """Bytes to start an output with that differ from the reference's value at every element, for each
    output in `group` (those of one size and dtype: the memfd may become any of them), new each call and
    telling the kernel nothing it could pass with: floats of random sign and a random size of 1 to 100
    times (2 |ref| + the output's largest magnitude), so never within tolerance and finite where the
    reference is not;
    integers drawn over the dtype's range, moved by one where they hit the reference's value; bool bytes
    2-255, which are no bool (a bool output holding one is `bad_output`). None: all-ones bytes."""
    w = group[0]
    n = w.numel()
    if w.dtype == torch.bool:
        return torch.randint(2, 256, (n,), generator=gen, dtype=torch.uint8)
    if w.is_floating_point():  # a few passes over the output in its own precision (float32 for narrower ones)
        info, work = torch.finfo(w.dtype), torch.float64 if w.dtype == torch.float64 else torch.float32
        size = torch.zeros(n, dtype=work)
        for o in group:
            torch.maximum(size, o.detach().cpu().reshape(-1).to(work).abs().nan_to_num_(0.0, 0.0, 0.0), out=size)
        top = float(size.max()) if n else 0.0
        side = torch.rand(n, generator=gen, dtype=work).sub_(0.5)  # its sign is the fill's, its size the factor
        fill = size.mul_(2).add_(max(top, 4 * info.tiny)).mul_(side.abs().mul(198).add_(1)).copysign_(side)
        over = fill.abs() >= info.max  # past the dtype's range: the largest value, opposite to the reference's
        if bool(over.any()):
            first = group[0].detach().cpu().reshape(-1).to(work)[over]
            fill[over] = -torch.where(first > 0, 1.0, -1.0).to(work) * info.max
        return fill.to(w.dtype).view(torch.uint8)
    if w.dtype not in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8):  # complex, wide unsigned
        return None
    info = torch.iinfo(w.dtype)
    fill = torch.randint(
        info.min, info.max, (n,), generator=gen, dtype=w.dtype if w.dtype.itemsize >= 4 else torch.int32
    )
    fill = fill.to(w.dtype)
    for _ in range(2 if len(group) > 1 else 1):  # twice for several: one step may land on another's value
        for o in group:
            o = o.detach().cpu().reshape(-1)
            hit = fill == o
            if bool(hit.any()):
                fill[hit] = o[hit] + 1
    return fill.view(torch.uint8)


def _fills(wants, gen):
    """Per output of the call, its starting bytes (`_wrong_everywhere`), one per size: the runner starts
    every memfd of that size with them."""
    made = {}
    for w in wants:
        key = w.numel() * w.element_size()
        if key not in made:
            group = [o for o in wants if o.numel() * o.element_size() == key and o.dtype == w.dtype]
            made[key] = _wrong_everywhere(group, gen)
    out = [made[w.numel() * w.element_size()] for w in wants]
    return None if any(f is None for f in out) else out


class Peer:
    """A process the judge forked, and the channel to it."""

    def __init__(self, who, pid, chan, err_file):
        self.who, self.pid, self.chan, self.err_file = who, pid, chan, err_file
        self.ended = None
        self.sent = []  # tokens of the requests the answer may be to
        self.answered = None  # the last request answered (a refusal found after an answer names it)
        self.listener = None  # the candidate's syscall-filter listener: its denied calls come here
        self.filter = None  # how its denied calls end: "listener" or "kill"
        self.pids = [pid]  # whose CPU time a call costs: the process and the kernel host it started

    def tell(self, msg, tensors=None, shared=False):
        """Send a request whose answer comes with the next one's."""
        token = secrets.token_hex(8)
        self.sent.append(token)
        try:
            return self.chan.send({**msg, "token": token}, tensors, shared=shared)
        except wire.PeerGone:
            raise self.death() from None

    def ask(self, msg, tensors=None, shared=False, keys=("outputs",)):
        """Send a request, return the answer (its outputs decoded, sealed); a refusal or death is a Verdict.
        The answer must name this request (a refusal may name an earlier one of the same exchange)."""
        views = self.tell(msg, tensors, shared)
        reply = self.recv(keys)
        sent, self.sent = self.sent, []
        if not reply.get("ok", False):
            if reply.get("reply_to") not in sent and reply.get("reply_to") != self.answered:
                raise Verdict("tampering", f"the {self.who} process answered a request it had not been sent")
            raise _refusal(reply)
        if reply.get("reply_to") != sent[-1]:
            raise Verdict("tampering", f"the {self.who} process answered before its request arrived")
        self.answered = sent[-1]
        reply["_views"] = views
        return reply

    def recv(self, keys=("outputs",)):
        """The next message; a system call the filter denied meanwhile ends the candidate (a Verdict)."""
        while self.listener is not None:
            ready = select.select([self.chan.sock, self.listener], [], [])[0]
            if self.listener not in ready:
                break
            denied = syscalls.receive(self.listener)
            if denied is None:  # the filtered process is gone: its channel says the rest
                os.close(self.listener)
                self.listener = None
                continue
            self.kill()
            raise Verdict("forbidden_op", "the kernel's process made the system call " + syscalls.describe(*denied))
        try:
            return self.chan.recv(keys, sealed=True)
        except wire.PeerGone:
            raise self.death() from None

    def kill(self):
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def death(self):
        """The Verdict for a process that went away without answering."""
        _, status = os.waitpid(self.pid, 0)
        self.ended = status
        tail = _tail(self.err_file)
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            if sig == signal.SIGXCPU:
                return Verdict("timeout", f"the {self.who} process ran past its CPU time limit")
            if sig == signal.SIGSYS and self.filter == "kill":
                return Verdict(
                    "forbidden_op",
                    f"the {self.who} process made a system call a kernel may not make (changing memory protection, "
                    "mapping executable memory, signal handlers, timers, threads, processes, files for writing, "
                    "...): the syscall filter ended it",
                )
            how = f"was killed by signal {signal.Signals(sig).name}"
        else:
            code = os.WEXITSTATUS(status)
            if code == 0:
                # a refusal it sent just before exiting may still wait in the channel (the judge's next
                # request found it gone first): that refusal is its answer
                try:
                    reply = self.chan.recv(("outputs",), sealed=True)
                except wire.PeerGone:
                    reply = None
                if reply is not None and not reply.get("ok", False):
                    return _refusal(reply)
                return Verdict("early_exit", f"the {self.who} process exited before it answered (early exit)")
            how = f"exited with code {code}"
        if any(m in tail for m in MEMORY_SIGNS):
            return Verdict("memory_exceeded", f"the {self.who} process ran out of memory ({how})\n{tail[-800:]}")
        return Verdict("crashed", f"the {self.who} process {how}\n{tail[-800:]}".strip())

    def cpu_ns(self):
        """CPU time the process (and its kernel host) has run, all threads, as the kernel counts it (they
        cannot change it). Read once no thread is on a CPU: the kernel adds a running thread's current
        slice only when it stops, so a read while the answering thread is still returning to its wait
        would miss a short call's time (or all of it) and count it in no call."""
        deadline = _perf_counter() + 0.2  # a thread that never stops is read as it is
        while True:
            total, running = 0, False
            for pid in self.pids:
                base = f"/proc/{pid}/task"
                try:
                    tids = os.listdir(base)
                except OSError:  # gone: its death is the verdict
                    continue
                for tid in tids:
                    try:
                        with open(f"{base}/{tid}/stat") as f:
                            running |= f.read().rpartition(")")[2].split()[0] == "R"
                        with open(f"{base}/{tid}/schedstat") as f:
                            total += int(f.read().split()[0])
                    except (OSError, ValueError, IndexError):
                        pass
            if not running or _perf_counter() > deadline:
                return total
            os.sched_yield()

    def end(self):
        if self.listener is not None:
            os.close(self.listener)
            self.listener = None
        if self.ended is not None:
            return
        try:
            self.chan.send({"op": "end"})
        except wire.PeerGone:  # it already ended; it is reaped below
            pass
        for _ in range(200):
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.ended = status
                return
            time.sleep(0.005)
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _, self.ended = os.waitpid(self.pid, 0)


REPORTED = frozenset(
    {"forbidden_op", "runtime_error", "early_exit", "bad_output", "kernel_not_called", "tampering", "bad_submission"}
    | {"crashed", "timeout"}  # of the kernel host, which only the candidate's process can wait for
)
"""The failures a runner may report about itself; anything else it says is not believed."""


def _refusal(reply):
    """The Verdict for a runner's refusal: one of the failures it may report, never a success."""
    status = reply.get("status")
    message = str(reply.get("message", ""))[:4000]
    if status not in REPORTED and status != "harness_error":
        return Verdict(
            "tampering", f"the candidate's process reported {str(status)[:40]!r}, not a failure it may report"
        )
    tb = reply.get("traceback")
    return Verdict(status, message, **({"traceback": str(tb)[:4000]} if tb else {}))


def _parent(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rpartition(")")[2].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _tail(path, n=4000):
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - n))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def _fork(who, main, *args):
    """A child process running `main(sock, *args)`; the judge keeps the other end."""
    mine, theirs = wire.pair()
    pid = os.fork()
    if pid == 0:
        mine.close()
        main(theirs, *args)
        os._exit(1)  # not reached: the mains end with os._exit
    theirs.close()
    return Peer(who, pid, wire.Channel(mine), f"{who}.err")


def _shared_batch(inputs):
    """The leading size every tensor input shares (a batch that can shrink), or None."""
    sizes = {x.shape[0] for x in inputs if isinstance(x, torch.Tensor) and x.dim() >= 1}
    tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
    if len(sizes) != 1 or not tensors or any(x.dim() == 0 for x in tensors):
        return None
    (size,) = sizes
    return size if size >= 2 else None


class Judge:
    def __init__(self, cfg, candidate):
        self.cfg = cfg
        self.device = cfg.get("device", "cpu")
        self.atol, self.rtol = cfg.get("atol", 1e-2), cfg.get("rtol", 1e-2)
        self.precision_rms = cfg.get("precision_rms", 1e-4)
        self.precision_factor = cfg.get("precision_factor", 32.0)
        self.noise_factor = NOISE_FACTOR
        self.candidate = candidate
        self.ref64 = None  # the reference in float64, made on first need (False: it cannot run so)
        self.sampler = None  # where the candidate's time goes (ipsample.Sampler), once it is prepared
        self.ref32 = None  # the reference in float32 (float64 outputs: the estimate of their own error)
        self.reference = None
        self.nan_open = True  # special trial: NaN in the reference's output passes any value (no `nan` named)
        self.result = {"trials": [], "timing": {}, "kernel_calls": 0}

    # -- set-up ---------------------------------------------------------------------------------------
    def load(self):
        cfg = self.cfg
        try:
            problem = _load_module("reference_problem", cfg["problem"])
        except Exception as e:
            raise Verdict("bad_problem", f"the problem file failed to import: {type(e).__name__}: {e}")
        for attr in ("Model", "get_inputs", "get_init_inputs"):
            if not hasattr(problem, attr):
                raise Verdict("bad_problem", f"the problem file defines no {attr}")
        declared = getattr(problem, "special_values", None)
        if declared is not None and (
            not isinstance(declared, (list, tuple)) or any(v not in SPECIAL_VALUES for v in declared)
        ):
            raise Verdict(
                "bad_problem",
                f"the problem's special_values must be a list of {', '.join(SPECIAL_VALUES)}; got {declared!r}",
            )
        self.problem = problem
        init = problem.get_init_inputs()
        torch.manual_seed(cfg.get("init_seed", 42))
        self.ref = problem.Model(*init).to(self.device).eval()
        if self.candidate is None:
            return
        self._imported()
        state = {k: v.detach().cpu() for k, v in runner.held(self.ref).items()}
        built = self.candidate.ask(
            {"op": "init", "init_seed": cfg.get("init_seed", 42)}, {"init": list(init), "state": state}
        )
        shared = set(built["shared"])
        self.unmatched = [k for k in built["names"] if k not in shared]
        self.ref_unmatched = [k for k in state if k not in shared]

    def _imported(self):
        """The candidate's process is prepared (its syscall filter's listener comes with that), then
        has imported the submission."""
        peer = self.candidate
        for step in ("prepared", "imported"):
            reply = peer.recv(())
            if not reply.get("ok"):
                raise _refusal(reply)
            if step == "prepared":
                peer.filter = reply.get("filter")
                if isinstance(reply.get("fd"), int):
                    peer.listener = reply["fd"]
                host = reply.get("kernel_host")
                # told before any submission code ran; counted while it is the candidate's child (once the
                # candidate is gone, its death is the verdict)
                if isinstance(host, int) and _parent(host) == peer.pid:
                    peer.pids.append(host)
                self.attach_sampler()

    def attach_sampler(self):
        """Perf events on every thread of the candidate's process (and its kernel host): from here on no
        thread can start there (RLIMIT_NPROC 0 and the syscall filter), and one that does is refused."""
        mode = self.cfg.get("ip_sampling", "require")
        if self.device != "cpu" or self.cfg.get("backend") == "triton":
            mode = "off"  # a GPU's work, or Triton's interpreter (numpy's code), is not the host's code to judge
        self.result["ip_sampling"] = mode
        if mode == "off":
            return
        try:
            ipsample.probe()
            self.sampler = ipsample.Sampler(self.candidate.pids)
        except ipsample.Unavailable as e:
            raise Verdict(
                "harness_error",
                f"the judge cannot sample where the candidate's time goes: {e}. ip_sampling='off' verifies "
                "without it (library code a kernel reaches at run time is then not seen)",
            ) from None
        except ipsample.Untraceable as e:
            raise Verdict("tampering", str(e)) from None

    def judge_samples(self):
        """Where the candidate's sampled time went, by kind, in every call but the first; library code above
        `library_share` of the samples outside the harness's own code is `library_compute`."""
        if self.sampler is None:
            return
        # every call but the first (which may hold one-time set-up: a table, a symbol lookup); the first
        # alone where there was no other
        phases = {p for p, _, _ in self.sampler.samples} - {"first"} or {"first"}
        try:
            located = self.sampler.attribute(phases)
        except ipsample.Untraceable as e:
            raise Verdict("tampering", str(e)) from None
        here = os.getcwd() + "/"
        kinds, library = {}, {}
        for path, address in located:
            kind = ipsample.classify(path, address, here)
            if kind.startswith("library"):
                where = kind.removeprefix("library ")
                library[where] = library.get(where, 0) + 1
                kind = "library"
            kinds[kind] = kinds.get(kind, 0) + 1
        total = len(located)
        work = total - kinds.get("harness", 0)  # the kernel's part of the call: its own code, runtime, library
        share = kinds.get("library", 0) / work if work else 0.0
        top = dict(sorted(library.items(), key=lambda kv: -kv[1])[:8])
        self.result["ip_samples"] = {
            "phases": sorted(phases),
            "samples": total,
            "by_kind": kinds,
            "library_share": share,
            "library": top,
            "lost": self.sampler.lost,
            "period_ns": self.sampler.period,
        }
        limit = self.cfg.get("library_share", 0.2)
        if share > limit and kinds.get("library", 0) >= ipsample.MIN_LIBRARY_SAMPLES:
            named = ", ".join(f"{k} ({v})" for k, v in list(top.items())[:3])
            raise Verdict(
                "library_compute",
                f"{100 * share:.0f}% of the kernel's sampled time ({kinds['library']} of {work} samples of its "
                f"calls after the first, the harness's own excluded) ran in "
                f"library code: {named}. A kernel computes in its own code (the C library, libm and OpenMP "
                f"allowed); at most {100 * limit:.0f}% of its time may lie in other libraries",
            )

    def aliasing(self, inputs):
        """Which of the reference's outputs share memory with its inputs, or with its previous call's
        outputs (a view, a kept buffer): only those of the candidate may do the same."""
        with torch.no_grad():
            first = _outputs(self.ref(*inputs))
            second = _outputs(self.ref(*inputs))
        tensors = [x for x in inputs if isinstance(x, torch.Tensor)] + first
        return [bool(o.numel()) and any(runner._overlap(o, t) for t in tensors if t.numel()) for o in second]

    def init_note(self):
        """For a wrong answer: which of ModelNew's tensors kept their seeded values instead of the reference's."""
        if not getattr(self, "unmatched", None):
            return ""
        return (
            f" Note: ModelNew's {', '.join(self.unmatched[:5])} matched no tensor of Model by name and shape "
            f"(Model has {', '.join(self.ref_unmatched[:5]) or 'none left'}), so they keep the values the "
            "seeded initialisation gave them: the same as Model's only if created in the same order, with "
            "the same shapes and initialisers."
        )

    # -- inputs ---------------------------------------------------------------------------------------
    def draw(self, seed):
        torch.manual_seed(seed)
        return list(self.problem.get_inputs())

    def trials(self):
        """(kind, seed, inputs, note) for every correctness trial, from the secret seed: the problem's own
        inputs, signed ones (KernelBench's torch.rand inputs are all in [0, 1), where identity passes
        ReLU), large ones (logits past exp's range: softmax without its max subtracted overflows), the
        problem's with outliers (a reduction that skips elements misses them), a smaller batch."""
        cfg, rng = self.cfg, self.rng
        for _ in range(cfg.get("seeds", 3)):
            seed = rng.randrange(1 << 62)
            inputs = self.draw(seed)
            self.template = inputs
            yield "get_inputs", seed, inputs, ""
        for kind, scale in (("signed", 2.0), ("large", 50.0)):
            for _ in range(cfg.get(f"{kind}_trials", 2 if kind == "signed" else 1)):
                seed = rng.randrange(1 << 62)
                yield kind, seed, self.gaussian(seed, scale), ""
        for _ in range(cfg.get("outlier_trials", 1)):
            seed = rng.randrange(1 << 62)
            yield "outliers", seed, self.outliers(self.draw(seed), seed), ""
        for _ in range(cfg.get("special_trials", 1)):
            seed = rng.randrange(1 << 62)
            required = self.special_values(seed)
            self.nan_open = "nan" not in required  # NaN made from them (inf - inf, 0 * inf) is not required
            if not required:
                self.result["trials"].append({"kind": "special", "skipped": "no special value to require here"})
                continue
            yield "special", seed, self.special(self.draw(seed), seed, required), f" (with {', '.join(required)})"
        for _ in range(cfg.get("extra_shapes", 1)):
            seed = rng.randrange(1 << 62)
            base = self.draw(seed)
            size = _shared_batch(base)
            if size is None:
                self.result["trials"].append({"kind": "extra_shape", "skipped": "the inputs share no batch dimension"})
                continue
            new = rng.randrange(1, size)
            inputs = [x[:new].contiguous() if isinstance(x, torch.Tensor) else x for x in base]
            yield "extra_shape", seed, inputs, f" (batch {new} instead of {size})"

    def gaussian(self, seed, scale):
        """get_inputs()'s tensors with their floating ones redrawn from N(0, scale^2), shaped as the first
        draw of this evaluation (no draw is wasted on values that are replaced)."""
        base = getattr(self, "template", None) or self.draw(seed)
        if any(isinstance(x, torch.Tensor) and not x.is_floating_point() for x in base):
            base = self.draw(seed)  # integer inputs (indices, labels) keep their own distribution
        gen = torch.Generator().manual_seed(seed)
        return [
            torch.randn(x.shape, dtype=x.dtype, generator=gen) * scale
            if isinstance(x, torch.Tensor) and x.is_floating_point()
            else x
            for x in base
        ]

    def outliers(self, inputs, seed):
        """A few elements (one in a thousand, at least one) of each floating input set to a thousand
        times the input's spread, on the side of their own sign."""
        gen = torch.Generator().manual_seed(seed)
        for x in inputs:
            if not (isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel()):
                continue
            flat = x.view(-1)
            picks = torch.randint(0, flat.numel(), (max(1, flat.numel() // 1000),), generator=gen)
            size = 1e3 * (float(x.float().std()) if x.numel() > 1 else 1.0) + 1.0
            flat[picks] = torch.where(flat[picks] < 0, -size, size).to(x.dtype)
        return inputs

    def special_values(self, seed):
        """The special values this problem's answers must get right: those its `special_values` names, or
        else each of DEFAULT_SPECIAL on which the reference runs and gives the same bytes twice (where
        the reference refuses a value or is not reproducible on it, nothing about it can be required)."""
        declared = getattr(self.problem, "special_values", None)
        if declared is not None:
            return tuple(declared)
        base = self.draw(seed)
        if not any(_is_float(x) and x.numel() for x in base):
            return ()
        kept = []
        for name in DEFAULT_SPECIAL:
            inputs = self.special(_clone(base, "cpu"), seed, (name,))
            try:
                with torch.no_grad():
                    first, second = (_outputs(self.ref(*_clone(inputs, self.device))) for _ in range(2))
            except Exception as e:  # the reference's own refusal: said in the result, not required
                refused = self.result.setdefault("special_not_required", {})
                refused[name] = f"the reference raised {type(e).__name__}: {str(e)[:200]}"
                continue
            if len(first) == len(second) and all(
                isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and _same_bytes(a.cpu(), b.cpu())
                for a, b in zip(first, second)
            ):
                kept.append(name)
        return tuple(kept)

    def special(self, inputs, seed, names):
        """`inputs` with special values placed in each floating tensor: every named value at its own random
        positions (one element in 32768, at least one), `-inf_row` over one whole last-dimension row."""
        gen = torch.Generator().manual_seed(seed)
        for x in inputs:
            if not (_is_float(x) and x.numel()):
                continue
            flat = x.view(-1)
            # the row of -inf last: a value placed after it would land in it and leave it not all -inf
            for name in sorted(names, key=lambda n: n == "-inf_row"):
                if name == "-inf_row":
                    if x.dim() >= 2 and x.shape[-1] > 1:
                        rows = x.view(-1, x.shape[-1])
                        rows[int(torch.randint(0, rows.shape[0], (1,), generator=gen))] = -math.inf
                    continue
                picks = torch.randint(0, flat.numel(), (max(1, flat.numel() // 32768),), generator=gen)
                if name == "denormal":
                    size = torch.rand(len(picks), generator=gen, dtype=torch.float64) * torch.finfo(x.dtype).tiny
                    sign = torch.randint(0, 2, (len(picks),), generator=gen) * 2 - 1
                    flat[picks] = (size * sign).to(x.dtype)
                else:
                    flat[picks] = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf, "neg_zero": -0.0}[name]
        return inputs

    # -- correctness -----------------------------------------------------------------------------------
    def compare(self, gots, wants, kind, note, inputs, spreads=None):
        """Raise a Verdict unless every output is right: shape, dtype, within atol/rtol, not degenerate,
        and (floating outputs) as precise as arithmetic in their dtype. Returns the worst relative RMS error."""
        spreads = {} if spreads is None else spreads
        if len(gots) != len(wants):
            raise Verdict("incorrect", f"returned {len(gots)} outputs, expected {len(wants)}")
        worst = 0.0
        for k, (g, w) in enumerate(zip(gots, wants)):
            if g.dtype == torch.bool and g.numel() and int(g.view(torch.uint8).max()) > 1:
                odd = int((g.view(torch.uint8) > 1).sum())
                raise Verdict(
                    "bad_output",
                    f"output {k} is a bool tensor with {odd} bytes other than 0 and 1 ({kind} inputs{note}): "
                    "a bool is stored as 0 or 1, and every element of an output must be written",
                )
            g, w, self.keep = _split_finite(g.to(self.device), w, kind == "special" and self.nan_open)
            if g is None:
                report, self.keep = self.keep, None
                report.update(output=k, kind=kind, shape_note=note)
                raise Verdict("incorrect", _describe(report), mismatch=report)
            if k not in spreads:
                spreads[k] = _spread(w) if w.is_floating_point() else (1.0, 1.0, 1.0)
            report, gap, rms = self.elementwise(g, w, inputs, k, spreads[k])
            if report is None and w.numel() >= 2 and w.is_floating_point():
                reason = _degenerate(g, spreads[k], w.numel(), gap)
                report = reason and {"reason": reason}
            if report is None and rms is not None:  # every floating dtype, each at its own precision
                rel, why = self.precise(g, w, rms, spreads[k][2], inputs, k)
                worst = max(worst, rel)
                report = {"reason": why} if why else None
            if report is not None:
                report.update(output=k, kind=kind, shape_note=note)
                raise Verdict("incorrect", _describe(report) + self.init_note(), mismatch=report)
        return worst

    def elementwise(self, got, want, inputs, k, spread):
        """(report or None, max |got - want| or None, RMS of got - want or None): every element within
        `tolerance` of the reference's. Within rtol of it everywhere, no float64 run is needed."""
        if got.shape != want.shape or got.dtype != want.dtype:
            return _mismatch(got, want), None, None
        if not (want.is_floating_point() or want.is_complex()):  # counts, indices, masks are exact
            return (None if torch.equal(got, want) else _mismatch(got, want)), None, None
        if not got.numel():
            return None, None, None
        complex_ = want.is_complex()
        g, w = (torch.view_as_real(got), torch.view_as_real(want)) if complex_ else (got, want)
        diff = (g.double() - w.double()).abs()  # NaN where got is NaN (the reference's NaN are set aside)
        if not bool((diff <= self.rtol * w.double().abs()).all()):
            allowed = self.tolerance(w, inputs, k, spread, complex_)
            if not bool((diff <= allowed).all()):
                return _mismatch(g, w, diff, allowed), None, None
        return None, float(diff.max()), (None if complex_ else _norms(diff)[1])

    def tolerance(self, want, inputs, k, spread, complex_=False):
        """Per element, how far from the reference an answer may be: `rtol` |ref| plus `noise_factor` times
        the reference's own numerical noise there, the change of its float64 evaluation when every floating
        input and weight moves by one unit of its dtype (`float64`) plus its own error against that truth
        (`own_error`), plus one unit of the output's dtype at the size of the values a kernel may round on the
        way (`_intermediate`). An element is judged at its own size, not the output's RMS: zeros in place of exp's
        small values, or of the small half of an output, are wrong, while a matmul's near-zero outputs get
        the rounding its terms' size brings. A reference that does not run in float64 (and complex outputs)
        keeps KernelBench's rule: `atol` in units of the output's RMS, plus rtol."""
        size = want.double().abs()
        exact, change = (None, None) if complex_ else self.float64(inputs, k)
        if exact is None:
            return self.rtol * size + self.atol * _finite_or_one(spread[2])
        own = self.own_error(want, exact, inputs, k)
        info = torch.finfo(want.dtype)
        return self.rtol * size + self.noise_factor * (change + own + info.eps * _intermediate(spread[2], inputs))

    def precise(self, got, want, rms, scale, inputs, k):
        """(relative RMS error, '' or why the error looks like lower-precision arithmetic).

        The error is judged against the reference's own error at the output's dtype on these inputs: a
        float64 evaluation of the reference is the truth, and the dtype's error is what the reference
        makes against it (`own_error`; at least one rounding of each value) plus what rounding its
        inputs by one unit of their dtype makes (how sensitive the output is: large where values cancel, as in a ReLU of a difference or a
        sparse output). A candidate within `precision_factor` of that, or within `precision_rms` of the
        output's RMS (for a finer dtype, scaled down by the ratio of its epsilon to float32's), computes in the
        output's precision; one a step lower (float16 for float32, float32 for float64) is thousands of
        times off. Close enough to the reference (8 units of the dtype times the output's RMS), no float64
        evaluation is needed."""
        eps = torch.finfo(want.dtype).eps
        floor_rms = self.precision_rms * min(1.0, eps / EPS32)
        if rms <= 8 * eps * scale:
            return (rms / scale if scale > 0 else 0.0), ""
        exact, change = self.float64(inputs, k)
        if exact is None:  # the reference cannot run in float64: against its own output, RMS-relative
            rel = rms / scale if scale > 0 else (0.0 if rms == 0 else math.inf)
            return rel, ("" if rel <= floor_rms else _low_precision(rel, floor_rms, "the output's RMS", want.dtype))
        truth = _norms(exact)[1]
        err = _norms(got.double() - exact)[1]
        own = math.hypot(_norms(self.own_error(want, exact, inputs, k))[1], eps * truth)
        sensitivity = _norms(change)[1]
        allowed = max(floor_rms * truth, self.precision_factor * math.hypot(own, sensitivity))
        rel = err / truth if truth > 0 else 0.0
        if err <= allowed:
            return rel, ""
        name = str(want.dtype).removeprefix("torch.")
        return rel, _low_precision(
            err / max(math.hypot(own, sensitivity), 1e-300),
            self.precision_factor,
            f"{name}'s own error here",
            want.dtype,
        )

    def own_error(self, want, exact, inputs, k):
        """|reference - truth| elementwise at want's dtype. For a float64 output, whose reference is the
        truth here, it is estimated from the reference run in float32 (on its inputs rounded to float32),
        scaled by the ratio of the two epsilons: how much the op amplifies rounding does not depend on
        the precision it rounds at (zero if the reference does not run in float32)."""
        if want.dtype != torch.float64:
            return (want.double() - exact).abs()
        cached = getattr(self, "_f32", None)
        if cached is None or cached[0] is not inputs:
            try:
                if getattr(self, "ref32", None) is None:
                    self.ref32 = copy.deepcopy(self.ref).float()
                rounded = [x.detach().float() if _is_float(x) else x for x in inputs]
                with torch.no_grad():
                    lower = [o.double() if _is_float(o) else None for o in _outputs(self.ref32(*rounded))]
            except Exception:
                lower = None
            cached = self._f32 = (inputs, lower)
        lower = cached[1]
        if lower is None or lower[k] is None or lower[k].shape != exact.shape:
            return torch.zeros_like(exact)
        return self.masked(
            ((lower[k] - exact).abs() * (torch.finfo(torch.float64).eps / EPS32)).nan_to_num(0.0, 0.0, 0.0)
        )

    def float64(self, inputs, k):
        """Output k of the reference in float64 on `inputs` (the truth), and per element how much it changes
        when every floating input and every floating tensor of the model moves by one unit of its own dtype
        (random signs; the largest change over `NUDGES` draws, so that an element whose change happens to
        cancel in one draw still gets its size): the reference's own sensitivity to rounding, large where
        values cancel. (None, None) if the reference does not run in float64."""
        if self.ref64 is None:
            try:
                self.ref64 = copy.deepcopy(self.ref).double()
                mine = runner.held(self.ref)
                self.held64 = [
                    (t, t.detach().clone(), torch.finfo(mine[name].dtype).eps)
                    for name, t in runner.held(self.ref64).items()
                    if t.is_floating_point() and name in mine
                ]
            except Exception:
                self.ref64 = False
        if self.ref64 is False:
            return None, None
        cached = getattr(self, "_f64", None)
        if cached is not None and cached[0] is inputs:
            return self.masked(cached[1][k]), self.masked(cached[2][k])
        gen = torch.Generator().manual_seed(len(self.result["trials"]))

        def signs(t):
            return (torch.randint(0, 2, t.shape, generator=gen) * 2 - 1).to(t.device, t.dtype)

        exact_in = [x.detach().to(self.device, torch.float64) if _is_float(x) else x for x in inputs]
        try:
            with torch.no_grad():
                exact = [o.double() for o in _outputs(self.ref64(*exact_in))]
                change = [torch.zeros_like(o) for o in exact]
                try:
                    for _ in range(NUDGES):
                        nudged_in = [
                            e * (1 + torch.finfo(x.dtype).eps * signs(e)) if _is_float(x) else e
                            for x, e in zip(inputs, exact_in)
                        ]
                        for t, initial, eps in self.held64:
                            t.copy_(initial * (1 + eps * signs(initial)))
                        for c, o, e in zip(change, _outputs(self.ref64(*nudged_in)), exact):
                            torch.maximum(c, (o.double() - e).abs().nan_to_num(0.0), out=c)
                finally:
                    for t, initial, _ in self.held64:
                        t.copy_(initial)
        except Exception:
            self.ref64 = False
            return None, None
        self._f64 = (inputs, exact, change)
        return self.masked(exact[k]), self.masked(change[k])

    def masked(self, t):
        """`t` with zeros where the output being compared has the reference's inf or NaN (set aside)."""
        keep = getattr(self, "keep", None)
        if keep is None or keep.shape != t.shape:
            return t
        return t.where(keep.to(t.device), torch.zeros((), dtype=t.dtype, device=t.device))

    def call(self, peer, inputs, expect, model="candidate", r=0):
        """One call, served the same way whatever it is for: the inputs in fresh memfds and a cache flush
        (before the clock starts), then the call, which ends when its whole output has come back.
        Returns (answer, the judge's views of the inputs it sent, wall seconds, CPU seconds)."""
        sizes = [o.numel() * o.element_size() for o in expect]
        tensors = {"inputs": inputs}
        if model == "candidate":
            fills = _fills(expect, torch.Generator().manual_seed(self.rng.randrange(1 << 62)))
            if fills is not None:
                tensors["fills"] = fills
        views = peer.ask({"op": "inputs", "r": r, "expect": sizes}, tensors, shared=True, keys=())["_views"]
        sampler = self.sampler if peer is self.candidate else None
        if sampler is not None:
            started = sampler.new_threads()
            if started:
                raise Verdict(
                    "tampering",
                    f"the candidate's process started thread {started[0]} after the judge attached its sampler: "
                    "every thread of a kernel's process is sampled",
                )
            sampler.enable()
        c0 = peer.cpu_ns()
        t0 = _perf_counter()
        reply = peer.ask({"op": "go", "model": model})
        elapsed = _perf_counter() - t0
        used = 1e-9 * (peer.cpu_ns() - c0)
        if sampler is not None:
            sampler.disable()
            sampler.drain()
            if sampler.phase == "first":
                sampler.phase = "trials"
        try:  # only now does it check its answer's memory (outside the measured time)
            peer.chan.send({"op": "measured", "token": peer.answered})  # a refusal now names the call
        except wire.PeerGone:
            raise peer.death() from None
        return reply, views, elapsed, used

    def redraw(self, seed):
        """Fresh values (`_fresh`) in every floating tensor the reference holds (parameters, buffers
        persistent or not), in place in the reference, the timed eager model once timing has begun and
        the candidate's tensors matched to them, before every timed round and one correctness trial:
        nothing a call derived from the weights (W's column sums kept in the kernel host, a product of
        two fixed buffers) is right in a later call unless recomputed there, inside its timed window,
        and a kernel that assumes a value (LayerNorm's ones and zeros, a PReLU slope) is wrong. Each
        draw starts from the initial values, so repeated draws do not drift."""
        gen = torch.Generator().manual_seed(seed)
        if getattr(self, "initial", None) is None:
            self.initial = {
                k: v.detach().cpu().clone() for k, v in runner.held(self.ref).items() if v.is_floating_point()
            }
        if not self.initial:
            return
        state = {k: _fresh(v, gen) for k, v in self.initial.items()}
        runner.assign(self.ref, state)
        self.ref64 = self.ref32 = self._f64 = self._f32 = None  # made again from the new weights on the next need
        if getattr(self, "timing", False):
            self.reference.ask({"op": "weights"}, {"state": state}, keys=())
        if self.candidate:
            self.candidate.ask({"op": "weights"}, {"state": state}, keys=())

    def unchanged(self, views, inputs, when):
        for v, x in zip(iter(views), (x for x in inputs if isinstance(x, torch.Tensor))):
            if not _same_bytes(v, x):
                raise Verdict("mutated_inputs", f"the candidate modified its input tensors in place ({when})")

    def verify(self):
        worst = 0.0
        trials = self.trials()
        redraw_at = self.rng.randrange(1, self.cfg.get("seeds", 3)) if self.cfg.get("seeds", 3) > 1 else 0
        for i, (kind, seed, inputs, note) in enumerate(trials):
            if i == redraw_at:
                self.redraw(self.rng.randrange(1 << 62))
            trial = {"kind": kind, "seed": seed}
            if note:
                trial["values" if kind == "special" else "shape"] = note.strip(" ()").removeprefix("with ")
            self.result["trials"].append(trial)
            cpu_inputs = [x.detach().cpu() if isinstance(x, torch.Tensor) else x for x in inputs]
            if not getattr(self, "set_up", False):
                self.set_up = True
                self.candidate.ask(
                    {
                        "op": "setup",
                        "flush_mb": self.cfg.get("flush_mb", 32),
                        "aliasing": self.aliasing(_clone(inputs, self.device)),
                    }
                )
            try:
                with torch.no_grad():
                    wants = _outputs(self.ref(*_clone(inputs, self.device)))
            except Exception as e:
                if kind != "extra_shape":
                    raise
                trial["skipped"] = f"the reference refuses this shape ({type(e).__name__})"
                continue
            try:
                reply, views, _, _ = self.call(self.candidate, cpu_inputs, wants)
            except Verdict as v:
                if note and v.status in ("runtime_error", "crashed"):
                    v.message = f"on an extra shape{note}: {v.message}"
                raise
            self.result["kernel_calls"] += int(reply.get("calls", 0))
            self.unchanged(views, cpu_inputs, f"{kind} inputs")
            worst = max(worst, self.compare(reply["outputs"], wants, kind, note, inputs))
            trial["ok"] = True
        self.result["error_rms_rel"] = worst

    # -- timing -----------------------------------------------------------------------------------------
    def time_all(self):
        """Rounds of timed calls, each model once per round in rotated order. Every round draws fresh
        inputs (all of them, from a seed drawn after the round before returned, outside any timed call),
        every model gets them in fresh memfds, and every timed call of the candidate is checked in full
        against eager PyTorch's output on the same inputs, its inputs for changes."""
        cfg = self.cfg
        base = [x.detach().cpu() if isinstance(x, torch.Tensor) else x for x in self.draw(self.rng.randrange(1 << 62))]
        if self.reference is None:
            raise Verdict("harness_error", "no reference process to time the baselines in")
        flush_mb = cfg.get("flush_mb", 32)
        state = {k: v.detach().cpu() for k, v in runner.held(self.ref).items()}
        ready = self.reference.ask(
            {"op": "time_setup", "flush_mb": flush_mb, "compile": bool(cfg.get("time_compile", False))},
            {"inputs": base, "state": state},
            shared=True,
        )
        models = {"eager", "null"} | ({"compile"} if cfg.get("time_compile", False) else set())
        if ready.get("compile_error"):
            self.result["compile_error"] = ready["compile_error"]
            models.discard("compile")
        names = (["candidate"] if self.candidate else []) + [m for m in ("eager", "compile") if m in models] + ["null"]
        if self.sampler is not None:
            self.sampler.phase = "timed"
            self.sampler.set_period(max(self.sampler.period, ipsample.TIMED_PERIOD_NS))
        with torch.no_grad():
            expect = _outputs(self.ref(*_clone(base, self.device)))  # the output sizes every call answers with
        warmup, runs = cfg.get("warmup", 3), cfg.get("timed_runs", 20)
        clock = cfg.get("clock", "wall")
        wall = {name: [] for name in names}
        times = {name: [] for name in names}
        cpu = {name: [] for name in names}
        warm = {name: [] for name in names}
        seeds = []
        r = 0
        while r < warmup + runs:
            seed = self.rng.randrange(1 << 62)  # the previous round has returned
            seeds.append(seed)
            inputs = [x.detach().cpu() if isinstance(x, torch.Tensor) else x for x in self.draw(seed)]
            self.timing = True
            if state:
                self.redraw(self.rng.randrange(1 << 62))
            if self.candidate:  # this round's answer: what the candidate's outputs start as is wrong everywhere
                with torch.no_grad():
                    round_wants = _outputs(self.ref(*_clone(inputs, self.device)))
            order = names[r % len(names) :] + names[: r % len(names)]  # interleaved, rotated
            answers = {}
            for name in order:
                peer = self.candidate if name == "candidate" else self.reference
                reply, views, elapsed, used = self.call(
                    peer, inputs, round_wants if name == "candidate" else expect, name, r
                )
                (times if r >= warmup else warm)[name].append(used if clock == "cpu" else elapsed)
                if r >= warmup:
                    cpu[name].append(used)
                    wall[name].append(elapsed)
                answers[name] = reply
                if name == "candidate":
                    self.result["kernel_calls"] += int(reply.get("calls", 0))
                    self.unchanged(views, inputs, f"timed run {r}")
            if self.candidate:
                wants = answers["eager"]["outputs"]
                try:
                    self.compare(answers["candidate"]["outputs"], wants, "timing", f" (timed run {r})", inputs)
                except Verdict as v:
                    v.message = "the output of a timed call is wrong: " + v.message
                    raise
            r += 1
            if r == warmup:  # small problems: more runs, so that the medians settle
                net = _quantile(warm["eager"], 0.5) - _quantile(warm["null"], 0.5) if warmup else 1.0
                target = cfg.get("min_timed_s", 0.05)
                if net > 0 and net * runs < target:
                    runs = min(runs * cfg.get("max_run_factor", 5), max(runs, math.ceil(target / net)))
        self.result["timing_seeds"] = seeds
        self.result["clock"] = clock
        overheads = {kind: _quantile(series["null"], 0.5) for kind, series in (("wall", wall), ("cpu", cpu))}
        self.result["timing_overhead_ms"] = 1e3 * overheads[clock]
        self.result["timing_overhead_wall_ms"] = 1e3 * overheads["wall"]
        for name in names:
            entry = {"runs": len(times[name])}
            for kind, series in (("wall", wall), ("cpu", cpu)):
                ts = series[name]
                med = _quantile(ts, 0.5)
                entry.update(
                    {
                        f"{kind}_median_ms": 1e3 * med,
                        f"{kind}_p25_ms": 1e3 * _quantile(ts, 0.25),
                        f"{kind}_p75_ms": 1e3 * _quantile(ts, 0.75),
                        f"{kind}_net_ms": 1e3 * max(med - overheads[kind], 0.05 * med),
                    }
                )
            for key in ("median_ms", "p25_ms", "p75_ms", "net_ms"):  # the clock the result uses
                entry[key] = entry[f"{clock}_{key}"]
            self.result["timing"][name] = entry
        if self.candidate:
            self.candidate.ask({"op": "finish"})


def run(cfg, candidate, reference=None):
    torch.set_num_threads(int(cfg.get("threads", 1)))
    judge = Judge(cfg, candidate)
    judge.reference = reference
    mode = cfg.get("mode", "profile")
    try:
        judge.load()
        judge.secret = secrets.randbits(62)  # after the candidate is loaded and built
        judge.rng = random.Random(judge.secret)
        if candidate is not None:
            judge.verify()
        if mode in ("profile", "baseline"):
            judge.time_all()
        judge.judge_samples()
        judge.result["status"] = "correct" if candidate is not None else "baseline"
        judge.result["message"] = ""
    except Verdict as v:
        judge.result.update(status=v.status, message=v.message, **v.extra)
    except Exception as e:
        judge.result.update(
            status="harness_error", message=f"{type(e).__name__}: {e}", traceback=traceback.format_exc(limit=-4)
        )
    finally:
        if judge.sampler is not None:
            judge.sampler.close()
        for peer in (candidate, judge.reference):
            if peer is not None:
                peer.end()
    if hasattr(judge, "secret"):
        judge.result["secret_seed"] = judge.secret  # told only now, for reproducing this evaluation
    return judge.result


def main():
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0: no process of this job reads our memory
    result_fd = os.dup(1)
    os.dup2(2, 1)  # stray output of torch or the problem goes to stderr, not into the result
    with open("config.json") as f:
        cfg = json.load(f)
    candidate = None
    if cfg.get("submission") is not None:  # forked before anything secret exists in this process
        candidate = _fork("candidate", runner.candidate_main, cfg)
    reference = None
    if cfg.get("mode", "profile") in ("profile", "baseline"):  # forked before any torch work here
        reference = _fork("reference", runner.reference_main, cfg)
    nonce = sys.stdin.readline().strip()
    t0 = _perf_counter()
    result = run(cfg, candidate, reference)
    result["harness_s"] = _perf_counter() - t0
    result["nonce"] = nonce
    text = (
        json.dumps(result, default=str, allow_nan=False)
        if _finite(result)
        else json.dumps({"status": "harness_error", "message": "non-finite number in the result", "nonce": nonce})
    )
    data = (text + "\n").encode()
    while data:
        data = data[os.write(result_fd, data) :]


def _finite(obj):
    if isinstance(obj, float):
        return math.isfinite(obj)
    if isinstance(obj, dict):
        return all(_finite(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return all(_finite(v) for v in obj)
    return True


if __name__ == "__main__":
    main()
