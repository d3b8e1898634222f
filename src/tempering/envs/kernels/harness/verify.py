"""Verify and time one candidate against its reference, inside a sandbox job (one fresh process each).

Reads `config.json` and a nonce line on stdin; writes `result.json` (status, mismatch report, timings)
carrying the nonce, and nothing else decides success: a process that exits before writing it failed.

Order of work, as KernelBench and CUDA Agent check it, plus the known reward hacks:
  1. import the problem, then the candidate (its import may not exit, raise, start threads or patch us);
  2. build the reference and the candidate under the same seed (KernelBench's rule), then load into
     the candidate the reference's tensors whose names and shapes it shares;
  3. correctness trials: fresh inputs per seed plus signed inputs; each model gets its own clone;
     the candidate runs before the reference and again after it; inputs must come back unchanged;
     outputs must be plain, materialised tensors, close to the reference, neither near-constant nor
     near-zero where the reference is not;
  4. during every candidate forward, torch operators other than allocation and views raise, and the
     compiled kernel must actually be called;
  5. timing: warm-up, then interleaved rounds (candidate, eager, torch.compile) with the cache flushed
     before each run; medians; the last timed candidate output is checked again;
  6. the harness's own functions and the timers must be unchanged at the end.
"""

import _thread
import builtins
import importlib.util
import json
import math
import os
import sys
import threading
import time
import traceback

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

# Captured before any candidate code runs; checked again at the end (monkeypatching the harness).
_perf_counter = time.perf_counter
_open = builtins.open
_json_dumps = json.dumps
_replace = os.replace
_CRITICAL = {
    "time.perf_counter": (time, "perf_counter"),
    "time.perf_counter_ns": (time, "perf_counter_ns"),
    "torch.testing.assert_close": (torch.testing, "assert_close"),
    "torch.allclose": (torch, "allclose"),
    "torch.equal": (torch, "equal"),
    "torch.randn": (torch, "randn"),
    "torch.rand": (torch, "rand"),
    "torch.randn_like": (torch, "randn_like"),
    "torch.Tensor.clone": (torch.Tensor, "clone"),
    "torch.Tensor.sub": (torch.Tensor, "sub"),
    "torch.Tensor.abs": (torch.Tensor, "abs"),
    "torch.Tensor.__sub__": (torch.Tensor, "__sub__"),
    "torch.nn.Module.__call__": (torch.nn.Module, "__call__"),
    "torch.nn.Module.load_state_dict": (torch.nn.Module, "load_state_dict"),
    "torch.cuda.synchronize": (torch.cuda, "synchronize"),
    "json.dumps": (json, "dumps"),
    "os.replace": (os, "replace"),
    "builtins.open": (builtins, "open"),
}
_SNAPSHOT = {name: getattr(obj, attr) for name, (obj, attr) in _CRITICAL.items()}

# What a candidate's forward may do with torch: allocate, look at metadata, take views and copies.
# Checked by name on every torch function and Tensor method call (TorchFunctionMode); everything else
# (arithmetic, torch.nn.functional, .numpy(), ...) raises.
ALLOWED_CALLS = {
    "empty",
    "empty_like",
    "empty_strided",
    "new_empty",
    "zeros",
    "zeros_like",
    "new_zeros",
    "zero_",
    "fill_",
    "view",
    "view_as",
    "reshape",
    "reshape_as",
    "contiguous",
    "t",
    "transpose",
    "permute",
    "unsqueeze",
    "squeeze",
    "expand",
    "expand_as",
    "flatten",
    "unflatten",
    "detach",
    "clone",
    "copy_",
    "to",
    "cpu",
    "cuda",
    "select",
    "narrow",
    "split",
    "chunk",
    "unbind",
    "__getitem__",
    "__get__",
    "__len__",
    "data_ptr",
    "numel",
    "nelement",
    "size",
    "dim",
    "ndimension",
    "stride",
    "is_contiguous",
    "element_size",
    "storage_offset",
    "is_floating_point",
    "get_device",
    "__format__",
    "__repr__",
}
# The same at the aten level, for compiled extensions that call into ATen from C++ (torch_ext, cuda).
ALLOWED_OPS = {
    "empty",
    "empty_like",
    "empty_strided",
    "new_empty",
    "new_empty_strided",
    "zeros",
    "zeros_like",
    "zero_",
    "fill_",
    "view",
    "_unsafe_view",
    "reshape",
    "as_strided",
    "t",
    "transpose",
    "permute",
    "unsqueeze",
    "squeeze",
    "expand",
    "alias",
    "detach",
    "clone",
    "copy_",
    "contiguous",
    "lift_fresh",
    "select",
    "slice",
    "split",
    "chunk",
    "unbind",
    "_to_copy",
    "to",
    "resize_",
}


EXTENSION_BACKENDS = ("torch_ext", "cuda")
"""Backends whose `load_inline` returns the extension the build job compiled, its calls counted."""
COUNTED_BACKENDS = ("c", "torch_ext", "cuda", "triton")
"""Backends whose forward must call the compiled kernel (a defined but unlaunched kernel is a decoy)."""


class Verdict(Exception):
    """Ends verification with a status (not `correct`) and a message for the feedback."""

    def __init__(self, status, message, **extra):
        super().__init__(message)
        self.status, self.message, self.extra = status, message, extra


class Guard:
    """Records forbidden operations seen during candidate code, even if the candidate swallows them."""

    def __init__(self, allowed, allowed_calls):
        self.allowed, self.allowed_calls = allowed, allowed_calls
        self.violations = []

    def flag(self, what):
        self.violations.append(what)
        raise RuntimeError(f"forbidden in the candidate's forward: {what}")


class _ThreadBan:
    """Starting a thread or process-level worker inside the candidate's forward is a violation."""

    def __init__(self):
        self.guard = None
        self._start, self._new = threading.Thread.start, _thread.start_new_thread
        ban = self

        def start(thread, *a, **k):
            if ban.guard is not None:
                ban.guard.flag("starting a thread (work the timer would not see)")
            return ban._start(thread, *a, **k)

        def start_new_thread(*a, **k):
            if ban.guard is not None:
                ban.guard.flag("starting a thread (work the timer would not see)")
            return ban._new(*a, **k)

        threading.Thread.start = start
        _thread.start_new_thread = start_new_thread


_THREADS = _ThreadBan()


class _BanCalls(TorchFunctionMode):
    def __init__(self, guard):
        super().__init__()
        self.guard = guard

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", str(func)).split(".")[0]  # aten overloads: `empty_like.default`
        if name not in self.guard.allowed_calls:
            self.guard.flag(f"torch call {name}")
        return func(*args, **(kwargs or {}))


class _BanOps(TorchDispatchMode):
    def __init__(self, guard):
        super().__init__()
        self.guard = guard

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ not in self.guard.allowed:
            self.guard.flag(f"torch operator aten.{func.overloadpacket.__name__}")
        return func(*args, **(kwargs or {}))


class KernelCounter:
    """Counts calls into the submission's compiled code (ctypes library, extension, Triton launch)."""

    def __init__(self):
        self.extra = [0]

    def count(self):
        n = self.extra[0]
        mod = sys.modules.get("ckernel")
        if mod is not None and hasattr(mod, "CALLS"):
            n += mod.CALLS[0]
        return n


def _load_module(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _install_extension_loader(cfg, counter):
    """torch_ext, cuda: `load_inline` returns the extension the build job compiled (cached by content)."""
    import torch.utils.cpp_extension as cpp_extension

    prebuilt = cfg.get("extension")

    def load_inline(name, *args, **kwargs):
        if not prebuilt or not os.path.exists(prebuilt):
            raise RuntimeError("no prebuilt extension was provided for load_inline")
        spec = importlib.util.spec_from_file_location(name, prebuilt)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return _CountingModule(module, counter)

    cpp_extension.load_inline = load_inline


class _CountingModule:
    """Wraps an extension module so that each call of one of its functions is counted."""

    def __init__(self, module, counter):
        self._module, self._counter = module, counter

    def __getattr__(self, name):
        fn = getattr(self._module, name)
        if not callable(fn):
            return fn

        def call(*args, **kwargs):
            self._counter.extra[0] += 1
            return fn(*args, **kwargs)

        return call


def _install_triton_hook(counter):
    """triton: count kernel launches; under the interpreter, let its own numpy copies through."""
    try:
        import triton.runtime.interpreter as interp
        import triton.runtime.jit as jit
    except Exception:
        return
    for cls in (getattr(interp, "InterpretedFunction", None), getattr(jit, "JITFunction", None)):
        if cls is None or not hasattr(cls, "run"):
            continue
        original = cls.run

        def run(self, *args, _original=original, **kwargs):
            counter.extra[0] += 1
            with torch._C.DisableTorchFunction(), _disable_current_modes():
                return _original(self, *args, **kwargs)

        cls.run = run


def _clone(inputs, device):
    return [x.detach().clone().to(device) if isinstance(x, torch.Tensor) else x for x in inputs]


def _outputs(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _check_plain(out, device, who):
    for k, o in enumerate(_outputs(out)):
        if type(o) is not torch.Tensor:
            raise Verdict("bad_output", f"{who} output {k} is a {type(o).__name__}, not a plain torch.Tensor")
        if o.layout != torch.strided or o.device.type != device or o.is_meta:
            raise Verdict("bad_output", f"{who} output {k} is not a materialised {device} tensor")


# The tensor functions the comparisons below use, taken before any candidate code runs: a candidate
# that patches one of them later cannot change what the harness computes with it.
_isclose, _aminmax = torch.isclose, torch.aminmax
_sub, _std = torch.Tensor.__sub__, torch.Tensor.std


def _surely_close(got, want, atol):
    """max |got - want| if it is surely within tolerance, else None (the exact check decides).

    Two passes (a difference and its extremes) where torch.isclose takes several times longer:
    max |got - want| <= atol, with a margin for rounding, implies isclose's |got - want| <= atol +
    rtol |want|. A NaN or inf, or an error near or above atol that rtol may still excuse, gives None."""
    if not got.is_floating_point() or got.numel() == 0:
        return None
    low, high = _aminmax(_sub(got, want))
    gap = max(-float(low), float(high))
    return gap if gap <= atol * (1 - 1e-6) else None


def _mismatch(got, want, atol, rtol):
    """None if close, else a report: shapes/dtypes, max abs and rel error and where."""
    if got.shape != want.shape:
        return {"reason": f"shape {tuple(got.shape)} != expected {tuple(want.shape)}"}
    if got.dtype != want.dtype:
        return {"reason": f"dtype {got.dtype} != expected {want.dtype}"}
    close = _isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    if bool(close.all()):
        return None
    g, w = got.detach().double().cpu(), want.detach().double().cpu()
    finite = torch.isfinite(w) & torch.isfinite(g)
    if not torch.equal(torch.isfinite(g), torch.isfinite(w)):
        return {"reason": "non-finite values where the reference is finite (or the reverse)"}
    zero = torch.zeros_like(g)
    diff = (g - w).abs().where(finite, zero)
    bad = ~close.cpu()
    flat = int(diff.argmax())
    where = [int(i) for i in torch.unravel_index(torch.tensor(flat), diff.shape)] if diff.dim() else []
    rel = (diff / w.abs().clamp_min(1e-12)).where(finite, zero)
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
    """(largest magnitude, standard deviation) of a tensor, the two numbers `_degenerate` compares."""
    t = t.detach().float()
    low, high = _aminmax(t)
    return max(abs(float(low)), abs(float(high))), float(_std(t))


def _degenerate(got, want_spread, numel, gap=None):
    """Near-constant or near-zero candidate output where the reference's (`want_spread`) is not.

    `gap`, a bound on |got - want| everywhere, can settle it without a pass over `got`: max|got| >=
    max|want| - gap, and std(got) >= std(want) - std(got - want) >= std(want) - gap * sqrt(n / (n - 1));
    only when those bounds (with a wide margin for rounding) do not rule it out is `got` measured."""
    if numel < 2:
        return None
    w_scale, w_std = want_spread
    if gap is not None:
        slack = 1.01 * gap * math.sqrt(numel / (numel - 1))
        if (w_scale <= 1e-4 or 0.99 * w_scale - slack > 1e-3 * w_scale) and (
            w_std <= 1e-4 or 0.99 * w_std - slack > 1e-3 * w_std
        ):
            return None
    g_scale, g_std = _spread(got)
    if w_scale > 1e-4 and g_scale <= 1e-3 * w_scale:
        return "near-zero output where the reference's is not"
    if w_std > 1e-4 and g_std <= 1e-3 * w_std:
        return "near-constant output where the reference's varies"
    return None


class Harness:
    def __init__(self, cfg):
        self.cfg = cfg
        self.device = cfg.get("device", "cpu")
        self.atol, self.rtol = cfg.get("atol", 1e-2), cfg.get("rtol", 1e-2)
        extra = set(cfg.get("allow_ops", []))
        self.guard = Guard(ALLOWED_OPS | extra, ALLOWED_CALLS | extra)
        # aten-level checks only where compiled code can call ATen itself (entering a dispatch mode
        # imports torch._dynamo: seconds per job)
        self.aten_guard = cfg.get("backend") in EXTENSION_BACKENDS
        self.counter = KernelCounter()
        self.result = {"trials": [], "timing": {}}

    # -- candidate calls, always under the ban -------------------------------------------------
    def call_candidate(self, model, inputs):
        before_threads = threading.active_count()
        before_calls = self.counter.count()
        try:
            _THREADS.guard = self.guard
            with torch.no_grad(), _BanCalls(self.guard):
                if self.aten_guard:
                    with _BanOps(self.guard):
                        out = model(*inputs)
                else:
                    out = model(*inputs)
            self.sync()
            _THREADS.guard = None
        except SystemExit:
            raise Verdict("early_exit", "the candidate's forward tried to exit the process")
        except Exception as e:
            _THREADS.guard = None
            if self.guard.violations:
                raise Verdict(
                    "forbidden_op",
                    self.guard.violations[0] + " (in forward, only allocate outputs, take views and call your kernel)",
                )
            raise Verdict(
                "runtime_error", f"forward raised {type(e).__name__}: {e}", traceback=traceback.format_exc(limit=-3)
            )
        if self.guard.violations:
            raise Verdict("forbidden_op", self.guard.violations[0] + " (caught and swallowed by the candidate)")
        if threading.active_count() > before_threads:
            raise Verdict("forbidden_op", "the candidate's forward left a thread running (work after return)")
        if self.cfg.get("backend") in COUNTED_BACKENDS and self.counter.count() == before_calls:
            raise Verdict(
                "kernel_not_called",
                "the forward never called the compiled kernel "
                "(a kernel that is defined but not launched does not count)",
            )
        return out

    def sync(self):
        if self.device == "cuda":
            torch.cuda.synchronize()

    # -- the steps -----------------------------------------------------------------------------
    def load(self):
        cfg = self.cfg
        try:
            problem = _load_module("reference_problem", cfg["problem"])
        except Exception as e:
            raise Verdict("bad_problem", f"the problem file failed to import: {type(e).__name__}: {e}")
        for attr in ("Model", "get_inputs", "get_init_inputs"):
            if not hasattr(problem, attr):
                raise Verdict("bad_problem", f"the problem file defines no {attr}")
        self.problem = problem
        if cfg.get("backend") in EXTENSION_BACKENDS:
            _install_extension_loader(cfg, self.counter)
        if cfg.get("backend") == "triton":
            _install_triton_hook(self.counter)
        if cfg.get("submission") is None:  # baseline-only job
            self.candidate_cls = None
            return
        threads = threading.active_count()
        try:
            cand = _load_module("candidate_submission", cfg["submission"])
        except SystemExit:
            raise Verdict("early_exit", "the submission tried to exit the process while being imported")
        except Exception as e:
            raise Verdict(
                "runtime_error",
                f"the submission failed to import: {type(e).__name__}: {e}",
                traceback=traceback.format_exc(limit=-3),
            )
        if threading.active_count() > threads:
            raise Verdict("forbidden_op", "the submission started a thread while being imported")
        if not hasattr(cand, "ModelNew"):
            raise Verdict("bad_submission", "the submission defines no class ModelNew")
        self.candidate_cls = cand.ModelNew
        self.check_untouched("importing the submission")

    def build(self):
        """Both models from the same seed, as KernelBench builds them: a ModelNew that creates the same
        parameters in the same order starts with the same values, whatever it names them. Tensors
        that ModelNew shares with Model by name and shape are then copied from the reference, so a
        different creation order does not matter where the names agree."""
        init = self.problem.get_init_inputs()
        torch.manual_seed(self.cfg.get("init_seed", 42))
        self.ref = self.problem.Model(*init).to(self.device).eval()
        self.unmatched = []
        if self.candidate_cls is None:
            return
        torch.manual_seed(self.cfg.get("init_seed", 42))
        try:
            self.cand = self.candidate_cls(*init)
            mine = self.cand.state_dict()
            ref_state = self.ref.state_dict()
            shared = {k: v for k, v in ref_state.items() if k in mine and tuple(mine[k].shape) == tuple(v.shape)}
            self.cand.load_state_dict(shared, strict=False)
            self.cand = self.cand.to(self.device).eval()
        except SystemExit:
            raise Verdict("early_exit", "ModelNew() tried to exit the process")
        except Exception as e:
            raise Verdict(
                "runtime_error",
                f"ModelNew(*get_init_inputs()) raised {type(e).__name__}: {e}",
                traceback=traceback.format_exc(limit=-3),
            )
        self.unmatched = [k for k in mine if k not in shared]
        self.ref_unmatched = [k for k in ref_state if k not in shared]

    def init_note(self):
        """For a wrong answer: which of ModelNew's tensors kept their seeded values instead of the reference's."""
        if not self.unmatched:
            return ""
        return (
            f" Note: ModelNew's {', '.join(self.unmatched[:5])} matched no tensor of Model by name and shape "
            f"(Model has {', '.join(self.ref_unmatched[:5]) or 'none left'}), so they keep the values the "
            "seeded initialisation gave them: the same as Model's only if created in the same order, with "
            "the same shapes and initialisers."
        )

    def trial_inputs(self):
        """(kind, seed, inputs): seeded get_inputs() trials, then signed variants."""
        seeds = self.cfg.get("seeds", [0, 1, 2, 3, 4])
        for seed in seeds:
            torch.manual_seed(seed)
            yield "get_inputs", seed, self.problem.get_inputs()
        for k in range(self.cfg.get("signed_trials", 2)):
            seed = 1000 + k
            torch.manual_seed(seed)
            base = self.problem.get_inputs()
            yield (
                "signed",
                seed,
                [
                    (torch.randn_like(x) * 2.0) if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                    for x in base
                ],
            )

    def verify(self):
        for kind, seed, inputs in self.trial_inputs():
            trial = {"kind": kind, "seed": seed}
            self.result["trials"].append(trial)
            # each run gets tensors of its own: the generated ones (moved to the device), a copy for the
            # reference, and the pristine copy for the second run once it has served the mutation check
            pristine = _clone(inputs, self.device)
            mine = [x.detach().to(self.device) if isinstance(x, torch.Tensor) else x for x in inputs]
            first = self.call_candidate(self.cand, mine)  # before the reference: no freed output to recycle
            for a, b in zip(mine, pristine):
                if isinstance(a, torch.Tensor) and not torch.equal(a, b):
                    raise Verdict("mutated_inputs", "the candidate modified its input tensors in place")
            with torch.no_grad():
                want = self.ref(*_clone(pristine, self.device))
            if kind == "signed" and not all(bool(torch.isfinite(w).all()) for w in _outputs(want)):
                trial["skipped"] = "reference output not finite on signed inputs"
                continue
            after = self.call_candidate(self.cand, pristine)
            spreads = {}  # the reference's, computed once for both runs
            for label, got in (("before", first), ("after", after)):
                _check_plain(got, self.device, "the candidate's")
                gots, wants = _outputs(got), _outputs(want)
                if len(gots) != len(wants):
                    raise Verdict("incorrect", f"returned {len(gots)} outputs, expected {len(wants)}")
                for k, (g, w) in enumerate(zip(gots, wants)):
                    gap = _surely_close(g, w, self.atol) if g.shape == w.shape and g.dtype == w.dtype else None
                    report = None if gap is not None else _mismatch(g, w, self.atol, self.rtol)
                    if report is None and w.numel() >= 2:
                        if k not in spreads:
                            spreads[k] = _spread(w)
                        report = _degenerate(g, spreads[k], w.numel(), gap)
                        report = report and {"reason": report}
                    if report is not None:
                        report.update(output=k, run=label, kind=kind, seed=seed)
                        trial["ok"] = False
                        raise Verdict("incorrect", _describe(report) + self.init_note(), mismatch=report)
            trial["ok"] = True
        self.check_untouched("the correctness trials")

    def time_all(self):
        cfg = self.cfg
        torch.manual_seed(cfg.get("timing_seed", 7))
        inputs = self.problem.get_inputs()
        runners = {}
        if self.candidate_cls is not None:
            cand_in = _clone(inputs, self.device)
            runners["candidate"] = lambda: self.call_candidate(self.cand, cand_in)
        eager_in = _clone(inputs, self.device)
        runners["eager"] = lambda: self.ref(*eager_in)
        if cfg.get("time_compile", False):
            try:
                compiled = torch.compile(self.ref)
                comp_in = _clone(inputs, self.device)
                with torch.no_grad():
                    compiled(*comp_in)
                runners["compile"] = lambda: compiled(*comp_in)
            except Exception as e:
                self.result["compile_error"] = f"{type(e).__name__}: {str(e)[:300]}"
        flush = torch.empty(int(cfg.get("flush_mb", 32) * 2**20) // 4, device=self.device)
        times = {name: [] for name in runners}
        names = list(runners)
        with torch.no_grad():
            for _ in range(cfg.get("warmup", 3)):
                for name in names:
                    runners[name]()
            last = None
            for r in range(cfg.get("timed_runs", 20)):
                order = names[r % len(names) :] + names[: r % len(names)]  # interleaved, rotated
                for name in order:
                    flush.fill_(float(r))
                    self.sync()
                    t0 = _perf_counter()
                    out = runners[name]()
                    self.sync()
                    times[name].append(_perf_counter() - t0)
                    if name == "candidate":
                        last = out
        if last is not None:  # the timed output must still be right (lazy or background work)
            want = self.ref(*_clone(inputs, self.device))
            for g, w in zip(_outputs(last), _outputs(want)):
                same_kind = g.shape == w.shape and g.dtype == w.dtype
                report = (
                    None
                    if same_kind and _surely_close(g, w, self.atol) is not None
                    else _mismatch(g, w, self.atol, self.rtol)
                )
                if report is not None:
                    report.update(run="timed", kind="timing", seed=cfg.get("timing_seed", 7))
                    raise Verdict("incorrect", "output of a timed run is wrong: " + _describe(report), mismatch=report)
        for name, ts in times.items():
            self.result["timing"][name] = {
                "median_ms": 1e3 * _quantile(ts, 0.5),
                "p25_ms": 1e3 * _quantile(ts, 0.25),
                "p75_ms": 1e3 * _quantile(ts, 0.75),
                "runs": len(ts),
            }
        self.check_untouched("timing")

    def check_untouched(self, when):
        for name, (obj, attr) in _CRITICAL.items():
            if getattr(obj, attr, None) is not _SNAPSHOT[name]:
                raise Verdict("tampering", f"{name} was replaced during {when}")


def _quantile(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def _describe(report):
    if report.get("reason") != "values differ":
        return f"{report['reason']} (output {report.get('output', 0)}, {report.get('kind')} inputs, seed {report.get('seed')})"
    return (
        f"output {report['output']} differs on {report['kind']} inputs (seed {report['seed']}, candidate run "
        f"{report['run']} the reference): {report['mismatched']}/{report['total']} elements outside "
        f"tolerance; max abs err {report['max_abs']:.3g}, max rel err {report['max_rel']:.3g}; at "
        f"{tuple(report['where'])} expected {report['expected']:.5g}, got {report['got']:.5g}"
    )


def run(cfg):
    torch.set_num_threads(int(cfg.get("threads", 1)))
    h = Harness(cfg)
    mode = cfg.get("mode", "profile")
    try:
        h.load()
        h.build()
        if h.candidate_cls is not None:
            h.verify()
        if mode in ("profile", "baseline"):
            h.time_all()
        h.result["status"] = "correct" if h.candidate_cls is not None else "baseline"
        h.result["message"] = ""
    except Verdict as v:
        h.result.update(status=v.status, message=v.message, **v.extra)
    h.result["kernel_calls"] = h.counter.count()
    return h.result


def main():
    nonce = sys.stdin.readline().strip()
    with _open("config.json") as f:
        cfg = json.load(f)
    t0 = _perf_counter()
    result = run(cfg)
    result["harness_s"] = _perf_counter() - t0
    result["nonce"] = nonce
    # Final check with the references captured at start, then an atomic write.
    for name, (obj, attr) in _CRITICAL.items():
        if getattr(obj, attr, None) is not _SNAPSHOT[name]:
            result.update(status="tampering", message=f"{name} was replaced by the candidate")
    text = (
        _json_dumps(result, default=str, allow_nan=False)
        if _finite(result)
        else _json_dumps({"status": "harness_error", "message": "non-finite number in the result", "nonce": nonce})
    )
    with _open("result.json.tmp", "w") as f:
        f.write(text)
    _replace("result.json.tmp", "result.json")


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
