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

from tempering import syntax

BACKENDS = ("c", "torch_ext", "cuda", "triton")

STREAM_ATTRS = {
    "stream": "work on another stream",
    "Stream": "work on another stream",
    "Event": "timers (CUDA events)",
    "record_stream": "work on another stream",
    "wait_stream": "work on another stream",
}
C_HEADERS = frozenset(
    {
        "math.h",
        "stdint.h",
        "stddef.h",
        "stdbool.h",
        "string.h",
        "stdlib.h",
        "float.h",
        "limits.h",
        "omp.h",
        "immintrin.h",
        "x86intrin.h",
        "arm_neon.h",
    }
)
"""Headers a `c` kernel may include: arithmetic, memory, OpenMP and SIMD intrinsics."""
_C_TOKENS = re.compile(r"\b(asm|__asm__|__asm|syscall|constructor|destructor|init_priority|_Pragma|_*optimize_*)\b|##")
"""Never in a C kernel: inline assembly, token pasting (which can build any of these), load-time code, and
the pragmas and attributes that turn optimisation flags (fast-math) back on."""
C_PRAGMAS = ("omp", "GCC ivdep", "GCC unroll", "once")
"""`#pragma`s a `c` kernel may use (others, `GCC optimize` among them, change how the judge's flags compile)."""
_FENCE = re.compile(r"```([A-Za-z0-9_+]*)[^\n]*\n(.*?)```", re.S)
_TRIGRAPHS = dict(zip("=(/)'<!>-", "#[\\]^{|}~"))
_DIGRAPHS = (("%:%:", "##"), ("%:", "#"), ("<:", "["), (":>", "]"), ("<%", "{"), ("%>", "}"))
_C_LEXEMES = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|/\*.*?\*/|//[^\n]*|/\*.*', re.S)


def c_logical_lines(source: str) -> list[tuple[int, str]]:
    """(first physical line, text) of each line of C as the compiler reads it: trigraphs replaced and
    backslash-newlines spliced (translation phases 1-2), each comment one space (phase 3, so a directive
    goes on past a comment's newlines), and digraphs written as the tokens they are, so that a check on
    the text sees what the preprocessor sees."""
    text = re.sub(r"\?\?([=(/)'<!>-])", lambda m: _TRIGRAPHS[m.group(1)], source)
    starts: list[int] = []
    lines: list[str] = []
    parts: list[str] = []
    for k, line in enumerate(text.split("\n"), 1):
        if not parts:
            starts.append(k)
        parts.append(line[:-1] if line.endswith("\\") else line)
        if not line.endswith("\\"):
            lines.append("".join(parts))
            parts = []
    if parts:
        lines.append("".join(parts))
    joined = "\n".join(lines)
    out, at, row = [], 0, 0
    for m in _C_LEXEMES.finditer(joined):
        if not m.group(0).startswith(("/*", "//")):
            continue
        out.append(joined[at : m.start()])
        row += joined.count("\n", at, m.start())
        gone = m.group(0).count("\n")
        del starts[row + 1 : row + 1 + gone]  # the lines a comment joins are one line
        out.append(" ")
        at = m.end()
    out.append(joined[at:])
    joined = "".join(out)
    for digraph, token in _DIGRAPHS:
        joined = joined.replace(digraph, token)
    return list(zip(starts, joined.split("\n")))


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
    no_kernel: bool = False
    """There is nothing to compile: no C source, extension or Triton kernel (a pure-torch answer)."""
    functions: list[str] = field(default_factory=list)
    """`c`: the functions the compiled library exports (set after the build; what load_c() may call)."""
    symbol_refusals: list[str] = field(default_factory=list)
    """`c`: what the compiled library calls outside `elf.C_SYMBOLS` (set after the build)."""


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


def _torch_call(tree: ast.Module) -> str | None:
    """The first call in ModelNew.forward that computes with torch (`torch.relu`, `F.gelu`, `x.clamp`)."""
    from tempering.envs.kernels.harness.policy import ALLOWED_CALLS

    for cls in tree.body:
        if not (isinstance(cls, ast.ClassDef) and cls.name == "ModelNew"):
            continue
        for fn in cls.body:
            if isinstance(fn, ast.FunctionDef) and fn.name == "forward":
                for node in ast.walk(fn):
                    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                        name = node.func.attr
                        root = node.func.value
                        if name in ALLOWED_CALLS or (isinstance(root, ast.Attribute) and root.attr == "lib"):
                            continue
                        if isinstance(root, ast.Name) and root.id == "self":
                            continue
                        return ast.unparse(node.func)
    return None


def undecodable(text: str) -> str:
    """'' if `text` is valid Unicode text, else what is wrong with it: a byte that is not UTF-8 (a file
    read with errors="surrogateescape") or a lone surrogate (which no file can hold)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        ch = text[e.start]
        line = text.count("\n", 0, e.start) + 1
        if "\udc80" <= ch <= "\udcff":
            what = f"byte 0x{ord(ch) - 0xDC00:02X} is not UTF-8"
        else:
            what = f"it holds a lone surrogate {ch!r}"
        return f"the submission is not UTF-8 text (line {line}: {what}); save it as UTF-8"
    return ""


def parse_submission(text: str, backend: str | None = None) -> Submission:
    """Split an answer into code, backend and sources; problems are listed in `errors`."""
    bad = undecodable(text)
    if bad:
        return Submission(code="", backend=backend or "c", errors=[bad])
    code, fenced_c = extract_code(text)
    try:
        tree = syntax.parse(code)
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
        sub.no_kernel = True
        used = _torch_call(tree)
        sub.errors.append(
            (f"torch operators are not allowed in the kernel (ModelNew.forward calls {used}), and " if used else "")
            + "the submission has no kernel source: put the computation in a C function inside a module-level "
            'string C_SOURCE = r"""...""" (a plain literal, compiled before the Python runs), load it with '
            "`from ckernel import load_c` / `self.lib = load_c()` in __init__ and call `self.lib.fn(x, y, n)` in "
            "forward, which may only allocate outputs, take views and call the kernel (a load_inline extension "
            "or a Triton kernel works too)"
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


def _real_module(name: str):
    """The module itself on this host, to resolve names against (None: not importable here)."""
    import importlib

    if name == "ckernel":
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


_MISSING = object()


def _attribute(module: str, name: str):
    real = _real_module(module)
    return (getattr(real, name, _MISSING) if real is not None else _MISSING), real is not None


def static_check(code: str) -> list[Violation]:
    """Findings that reject a submission before it is compiled or run (empty list: clean).

    The rules follow `harness/policy.py`, which the candidate's process also enforces at run time:
    every imported module and every imported name (`from X import Y` checks X.Y) is resolved against
    the allowed modules; so is every attribute chain that starts at one (`torch.os`, `F.torch._C`);
    no attribute starting with an underscore is reached except `self._x` and `super().__init__`; only
    allowed builtins are used; attributes are assigned on `self` only, never on an imported object,
    a class or an alias of either; classes subclass `nn.Module` (or the submission's own classes) and
    define no special method but `__init__`; no try/except, global state, generators or lambdas."""
    from tempering.envs.kernels.harness import policy

    try:
        tree = syntax.parse(code)
    except SyntaxError as e:
        return [Violation("syntax", e.lineno or 0, f"syntax error: {e.msg}")]
    out: list[Violation] = []

    def flag(rule, node, message):
        out.append(Violation(rule, getattr(node, "lineno", 0), message))

    modules: dict[str, str] = {}  # local name -> allowed module it stands for
    objects: dict[str, tuple[str, str]] = {}  # local name -> (module, name) imported from it
    classes = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bound.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.alias):
            bound.add(node.asname or node.name.split(".")[0])
        elif (isinstance(node, ast.ExceptHandler) and node.name) or (
            isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name
        ):
            bound.add(node.name)

    # imports: the module and every name taken from it
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                bad = next(
                    (
                        ".".join(parts[:k])
                        for k in range(1, len(parts) + 1)
                        if ".".join(parts[:k]) not in policy.MODULES
                    ),
                    None,
                )
                if bad:
                    flag(
                        "import",
                        node,
                        f"import of {bad!r} is not allowed (allowed: {', '.join(sorted(policy.MODULES))})",
                    )
                    continue
                modules[alias.asname or parts[0]] = alias.name if alias.asname else parts[0]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                flag("import", node, "relative imports are not allowed")
                continue
            if module not in policy.MODULES:
                flag(
                    "import",
                    node,
                    f"import from {module!r} is not allowed (allowed: {', '.join(sorted(policy.MODULES))})",
                )
                continue
            for alias in node.names:
                if alias.name == "*":
                    flag("import", node, f"from {module} import * is not allowed: import the names you use")
                    continue
                value, known = _attribute(module, alias.name)
                why = policy.refusal(module, alias.name, value, known=known and value is not _MISSING)
                if why:
                    flag("import", node, f"from {module} import {alias.name}: {why}")
                    continue
                local = alias.asname or alias.name
                sub = policy.module_name(module, alias.name, value)
                if sub:
                    modules[local] = sub
                else:
                    objects[local] = (module, alias.name)

    # names: only the submission's own, imported ones and the allowed builtins
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            if node.id not in bound and node.id not in policy.BUILTINS:
                flag("forbidden_name", node, f"{node.id} is not available to a submission")

    # attributes: chains from an allowed module, private names, streams, classes
    inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        attr = node.attr
        if attr.startswith("_"):
            on_self = isinstance(node.value, ast.Name) and node.value.id == "self" and not attr.startswith("__")
            on_super = (
                attr == "__init__"
                and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Name)
                and node.value.func.id == "super"
            )
            if not (on_self or on_super):
                flag("private_attr", node, f".{attr} is not allowed (private and special attributes are out of reach)")
        if attr in STREAM_ATTRS:
            flag("forbidden_attr", node, f".{attr} is not allowed ({STREAM_ATTRS[attr]})")
        if isinstance(node.value, ast.Name) and node.value.id in classes:
            flag("class_attr", node, f"{node.value.id}.{attr}: reach attributes through an instance, not the class")
        if id(node) in inner:
            continue
        chain: list[str] = []
        root: ast.expr = node
        while isinstance(root, ast.Attribute):
            chain.append(root.attr)
            root = root.value
        if not (isinstance(root, ast.Name) and root.id in modules):
            continue
        module = modules[root.id]
        for name in reversed(chain):
            value, known = _attribute(module, name)
            why = policy.refusal(module, name, value, known=known and value is not _MISSING)
            if why:
                flag("module_attr", node, why)
                break
            sub = policy.module_name(module, name, value)
            if sub is None:
                break
            module = sub

    def is_module_class(base) -> bool:
        if isinstance(base, ast.Name):
            return base.id in classes or objects.get(base.id) == ("torch.nn", "Module")
        chain, root = [], base
        while isinstance(root, ast.Attribute):
            chain.append(root.attr)
            root = root.value
        if not (isinstance(root, ast.Name) and root.id in modules) or not chain:
            return False
        full = ".".join([modules[root.id], *reversed(chain)])
        return full == "torch.nn.Module"

    for node in ast.walk(tree):
        if isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
            flag(
                "try_except",
                node,
                "try/except is not allowed: a fallback to the reference hides a failing kernel; let errors surface",
            )
        elif isinstance(node, ast.ClassDef):
            for base in node.bases:
                if not is_module_class(base):
                    flag(
                        "base_class",
                        node,
                        f"class {node.name} subclasses {ast.unparse(base)}: a submission's classes subclass "
                        "nn.Module (or its own classes) only (no tensor subclasses, torch modes or reference models)",
                    )
            for kw in node.keywords:
                flag("base_class", node, f"class {node.name}: class keywords ({kw.arg}=) are not allowed")
            for stmt in node.body:  # `__del__ = f` binds a special method as surely as `def __del__`
                bound_here: list[ast.expr] = []
                if isinstance(stmt, ast.Assign):
                    bound_here = list(stmt.targets)
                elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
                    bound_here = [stmt.target]
                for t in bound_here:
                    for name in (n.id for n in ast.walk(t) if isinstance(n, ast.Name)):
                        if name.startswith("__") and name.endswith("__"):
                            flag(
                                "special_method",
                                stmt,
                                f"{name} = ... in class {node.name}: special methods are not allowed, however "
                                "they are bound (they run at moments the harness does not choose)",
                            )
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name.startswith("__") and node.name.endswith("__") and node.name not in policy.SPECIAL_METHODS:
                flag(
                    "special_method",
                    node,
                    f"def {node.name}: special methods other than __init__ are not allowed (they run at moments "
                    "the harness does not choose)",
                )
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            flag(
                "global_state",
                node,
                "global/nonlocal state is not allowed (results must be computed from the inputs on every call)",
            )
        if isinstance(node, (ast.Yield, ast.YieldFrom, ast.Await, ast.AsyncFunctionDef, ast.Lambda)):
            flag("lazy", node, "generators, lambdas and async code are not allowed (no lazy evaluation)")

    # assignments: attributes of self only (no patching through any alias), and self is not rebound
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            targets = [node.target]
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            targets = [node.optional_vars]
        else:
            continue
        stack = list(targets)
        while stack:
            t = stack.pop()
            if isinstance(t, (ast.Tuple, ast.List)):
                stack.extend(t.elts)
            elif isinstance(t, ast.Starred):
                stack.append(t.value)
            elif isinstance(t, ast.Attribute):
                if not (isinstance(t.value, ast.Name) and t.value.id == "self" and not t.attr.startswith("__")):
                    flag(
                        "monkeypatch",
                        t,
                        f"assigning to {ast.unparse(t)} changes an object outside the submission's own model "
                        "(only self.name = ... is allowed)",
                    )
            elif isinstance(t, ast.Name) and t.id == "self":
                flag("monkeypatch", t, "rebinding self is not allowed")
    return sorted(out, key=lambda v: v.line)


def c_source_check(source: str) -> list[Violation]:
    """Findings in a `c` kernel's source: headers outside `C_HEADERS`, inline assembly, token pasting,
    load-time constructors. (What the compiled kernel calls is checked on the library: elf.py.)"""
    out = []
    for k, line in c_logical_lines(source):
        pragma = re.match(r"\s*#\s*pragma\b\s*(.*)", line)
        if pragma and not any(re.match(re.escape(p) + r"\b", pragma.group(1)) for p in C_PRAGMAS):
            allowed = ", ".join(C_PRAGMAS)
            out.append(Violation("c_source", k, f"#pragma {pragma.group(1)[:40]} is not allowed (allowed: {allowed})"))
        m = re.match(r"\s*#\s*include\s*[<\"]([^>\"]+)[>\"]", line)
        if m and m.group(1) not in C_HEADERS:
            allowed = ", ".join(sorted(C_HEADERS))
            out.append(Violation("c_include", k, f"#include <{m.group(1)}> is not allowed (allowed: {allowed})"))
        elif not m and re.match(r"\s*#\s*include", line):
            out.append(Violation("c_include", k, '#include must name a header in <...> or "..."'))
        for m in _C_TOKENS.finditer(line):
            out.append(Violation("c_source", k, f"{m.group(0)!r} is not allowed in a C kernel"))
    return out
