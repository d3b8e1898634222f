"""A candidate submission: its Python code, its backend, its kernel sources, and static checks.

A submission is a Python file defining `class ModelNew(nn.Module)`; a policy's answer may also wrap
it in a ```python fence (with C in a ```c fence). Nothing here runs the code: sources are read from
the AST, and the checks below reject, before any compile, the shortcuts KernelBench's static checker
rejects (try/except fallbacks, threads and processes, timer patching, tensor subclasses, ...).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

BACKENDS = ("c", "torch_ext", "cuda", "triton")

# Modules a submission may import. Everything else (os, sys, threading, time, ctypes, numpy, ...) is
# rejected: kernels need none of them, and each is a known route to a reward hack.
ALLOWED_IMPORTS = {
    "torch",
    "torch.nn",
    "torch.nn.functional",
    "torch.utils.cpp_extension",
    "math",
    "typing",
    "__future__",
    "ckernel",
    "triton",
    "triton.language",
}
# Names whose use is reserved to the harness (introspection, dynamic code, process control).
FORBIDDEN_NAMES = {
    "exec",
    "eval",
    "compile",
    "__import__",
    "globals",
    "locals",
    "vars",
    "getattr",
    "setattr",
    "delattr",
    "open",
    "exit",
    "quit",
    "breakpoint",
    "input",
    "memoryview",
}
FORBIDDEN_ATTRS = {
    "__torch_function__": "tensor subclass hooks",
    "__torch_dispatch__": "tensor subclass hooks",
    "_C": "torch internals",
    "_python_dispatch": "torch internals",
    "__dict__": "introspection",
    "__class__": "introspection",
    "__subclasses__": "introspection",
    "__globals__": "introspection",
    "__builtins__": "introspection",
    "__code__": "introspection",
    "__closure__": "introspection",
    "f_back": "frame introspection",
    "perf_counter": "timers",
    "perf_counter_ns": "timers",
    "process_time": "timers",
    "monotonic": "timers",
    "Event": "timers (CUDA events)",
    "Stream": "work on another stream",
    "stream": "work on another stream",
    "Thread": "threads",
    "fork": "processes",
}
_FENCE = re.compile(r"```([A-Za-z0-9_+]*)[^\n]*\n(.*?)```", re.S)


@dataclass
class Violation:
    """One static-check finding."""

    rule: str
    """Short rule name (`import`, `try_except`, `forbidden_name`, `monkeypatch`, `tensor_subclass`, ...)."""
    line: int
    """1-based line of the offending code."""
    message: str
    """What is wrong and what to do instead."""


@dataclass
class Submission:
    """What a policy (or a file) submitted for one problem."""

    code: str
    """The Python file text defining `ModelNew`."""
    backend: str
    """`c`, `torch_ext`, `cuda` or `triton` (inferred from the code unless given)."""
    c_source: str | None = None
    """C source of a `c` submission (module-level `C_SOURCE` string)."""
    cuda_source: str | None = None
    """CUDA source of a `cuda` submission (`cuda_sources=` of `load_inline`, or `CUDA_SOURCE`)."""
    ext_args: dict | None = None
    """torch_ext: the `load_inline` arguments when all are literals (the build then depends on them
    alone, so a change to the Python glue reuses the cached extension); None: build by running the file."""
    errors: list[str] = field(default_factory=list)
    """Why this cannot be run at all (no ModelNew, syntax error, no source found)."""


def extract_code(text: str) -> tuple[str, str | None]:
    """(python code, C source from a ```c fence or None) from a raw file or a fenced answer."""
    blocks = _FENCE.findall(text)
    if not blocks:
        return text, None
    python = [body for lang, body in blocks if lang.lower() in ("python", "py", "")]
    c = [body for lang, body in blocks if lang.lower() in ("c", "cpp", "c++")]
    with_model = [b for b in python if "ModelNew" in b]
    code = (with_model or python or [text])[-1]
    return code, (c[-1] if c else None)


def _literal(tree: ast.Module, name: str) -> str | None:
    """Value of a module-level `name = "literal"` (plain string constant), else None."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                return node.value.value
    return None


def _resolve(tree: ast.Module, node: ast.AST):
    """A literal value (str, list of str, bool, None), following module-level names; raises ValueError."""
    if isinstance(node, ast.Name):
        for stmt in tree.body:
            if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == node.id for t in stmt.targets):
                return _resolve(tree, stmt.value)
        raise ValueError(node.id)
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_resolve(tree, e) for e in node.elts]
    return ast.literal_eval(node)


def _literal_ext_args(tree: ast.Module, call: ast.Call) -> dict | None:
    keys = (
        "name",
        "cpp_sources",
        "cuda_sources",
        "functions",
        "extra_cflags",
        "extra_cuda_cflags",
        "extra_ldflags",
        "extra_include_paths",
        "with_cuda",
    )
    args = {}
    try:
        for key, node in zip(keys, call.args):
            args[key] = _resolve(tree, node)
        for kw in call.keywords:
            if kw.arg is None:
                return None
            if kw.arg in keys:
                args[kw.arg] = _resolve(tree, kw.value)
    except (ValueError, SyntaxError, TypeError):
        return None
    return args if "name" in args and "cpp_sources" in args else None


def _load_inline_calls(tree: ast.Module) -> list[ast.Call]:
    calls = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if name == "load_inline":
                calls.append(node)
    return calls


def parse_submission(text: str, backend: str | None = None) -> Submission:
    """Split an answer into code, backend and sources; problems are listed in `errors`."""
    code, fenced_c = extract_code(text)
    try:
        tree = ast.parse(code)
    except SyntaxError as e:
        return Submission(code=code, backend=backend or "c", errors=[f"syntax error on line {e.lineno}: {e.msg}"])
    sub = Submission(code=code, backend=backend or "")
    if not any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body):
        sub.errors.append("the submission defines no class ModelNew (same constructor and forward as Model)")
    sub.c_source = _literal(tree, "C_SOURCE")
    if sub.c_source is None and fenced_c is not None:
        sub.c_source = fenced_c
        sub.code = f"C_SOURCE = {fenced_c!r}\n" + code
    cuda = _literal(tree, "CUDA_SOURCE")
    calls = _load_inline_calls(tree)
    for call in calls:
        for kw in call.keywords:
            if kw.arg == "cuda_sources":
                if isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
                    cuda = kw.value.value
                elif isinstance(kw.value, ast.Name):
                    cuda = _literal(tree, kw.value.id) or cuda
    sub.cuda_source = cuda
    if not sub.backend:
        uses_triton = any(
            isinstance(n, (ast.Import, ast.ImportFrom)) and "triton" in ast.unparse(n) for n in ast.walk(tree)
        )
        if cuda is not None:
            sub.backend = "cuda"
        elif calls:
            sub.backend = "torch_ext"
        elif uses_triton:
            sub.backend = "triton"
        else:
            sub.backend = "c"
    if sub.backend not in BACKENDS:
        sub.errors.append(f"unknown backend {sub.backend!r}: use one of {', '.join(BACKENDS)}")
    elif sub.backend == "c" and sub.c_source is None and not sub.errors:
        sub.errors.append(
            'no C source: put the kernel in a module-level string C_SOURCE = r"""...""" '
            "(a plain literal, so that it compiles before the Python runs) and call it via "
            "ckernel.load_c()"
        )
    elif sub.backend == "cuda" and cuda is None:
        sub.errors.append(
            "no CUDA source: pass cuda_sources= a string literal (or a module-level string "
            "variable) to load_inline, or define CUDA_SOURCE"
        )
    elif sub.backend == "torch_ext" and len(calls) != 1:
        sub.errors.append(f"a torch_ext submission calls load_inline exactly once (found {len(calls)})")
    if sub.backend in ("torch_ext", "cuda") and len(calls) == 1:
        sub.ext_args = _literal_ext_args(tree, calls[0])
    return sub


def static_check(code: str) -> list[Violation]:
    """Findings that reject a submission before it is compiled or run (empty list: clean)."""
    try:
        tree = ast.parse(code)
    except SyntaxError as e:
        return [Violation("syntax", e.lineno or 0, f"syntax error: {e.msg}")]
    out: list[Violation] = []
    modules: set[str] = set()
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for alias in node.names:
                modules.add(alias.asname or alias.name.split(".")[0])
            for name in names:
                if name not in ALLOWED_IMPORTS:
                    out.append(
                        Violation(
                            "import",
                            line,
                            f"import of {name!r} is not allowed (allowed: {', '.join(sorted(ALLOWED_IMPORTS))})",
                        )
                    )
        elif isinstance(node, ast.Try):
            out.append(
                Violation(
                    "try_except",
                    line,
                    "try/except is not allowed: a fallback to the reference hides a failing kernel; let errors surface",
                )
            )
        elif isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES:
            out.append(Violation("forbidden_name", line, f"{node.id}() is not allowed in a submission"))
        elif isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_ATTRS:
            out.append(Violation("forbidden_attr", line, f".{node.attr} is not allowed ({FORBIDDEN_ATTRS[node.attr]})"))
        elif isinstance(node, ast.ClassDef):
            for base in node.bases:
                text = ast.unparse(base)
                if (
                    text.split(".")[-1] in ("Tensor", "Parameter")
                    or "TorchFunctionMode" in text
                    or "DispatchMode" in text
                ):
                    out.append(
                        Violation(
                            "tensor_subclass",
                            line,
                            f"class {node.name} subclasses {text}: tensor subclasses and torch modes are not allowed",
                        )
                    )
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            out.append(
                Violation(
                    "global_state",
                    line,
                    "global/nonlocal state is not allowed (results must be computed from the inputs on every call)",
                )
            )
        elif isinstance(node, (ast.Yield, ast.YieldFrom, ast.Await, ast.AsyncFunctionDef, ast.Lambda)):
            out.append(
                Violation("lazy", line, "generators, lambdas and async code are not allowed (no lazy evaluation)")
            )
    for node in ast.walk(tree):
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, (ast.AugAssign, ast.AnnAssign))
            else []
        )
        for t in targets:
            root = t
            while isinstance(root, (ast.Attribute, ast.Subscript)):
                root = root.value
            if isinstance(t, (ast.Attribute, ast.Subscript)) and isinstance(root, ast.Name) and root.id in modules:
                out.append(
                    Violation(
                        "monkeypatch",
                        node.lineno,
                        f"assigning to {ast.unparse(t)} patches a library or the harness; not allowed",
                    )
                )
    return sorted(out, key=lambda v: v.line)
