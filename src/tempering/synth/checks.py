"""Static checks of synthesised bundles: Harbor's own rules, plus what synthesis needs (an oracle per step,
a reward on pass and fail, the solution and tests kept out of the image, bounds, and distance from the seed).
"""

from __future__ import annotations

import fnmatch
import hashlib
import posixpath
import re
import shlex
from pathlib import PurePosixPath

from pydantic import Field

from tempering.config import Schema
from tempering.envs.terminal.bundle import Bundle, Problem, harbor_problems
from tempering.envs.terminal.image import dockerfile_lines, script_commands


class CheckLimits(Schema):
    """Bounds of the static checks."""

    max_file_bytes: int = Field(1 << 20, gt=0, description="Largest single file.")
    max_total_bytes: int = Field(8 << 20, gt=0, description="Largest bundle (all files).")
    max_files: int = Field(200, gt=0, description="Most files in a bundle.")
    max_overlap: float = Field(
        0.9,
        ge=0,
        le=1,
        description="Highest `overlap` with the seed (mean share of lines copied per part) before it counts as a copy.",
    )


_REWARD_WRITE = re.compile(r"(?:echo|printf)\s+(?:-n\s+)?(['\"]?)([^\s'\"]+)\1[^\n>]*>>?\s*\S*(?:reward|REWARD)")


def _reward_values(test_sh: str) -> set[str]:
    return {m.group(2) for m in _REWARD_WRITE.finditer(test_sh)}


def check_bundle(
    bundle: Bundle,
    seed: Bundle | None = None,
    edit_mask: frozenset[str] = frozenset(),
    required_skills: frozenset[str] = frozenset(),
    limits: CheckLimits | None = None,
) -> list[Problem]:
    """All static checks; an empty list means the bundle may go on to gold verification."""
    lim = limits or CheckLimits()
    probs = harbor_problems(bundle)
    add = lambda code, msg: probs.append(Problem(code, msg))
    for step in bundle.steps:
        where = f"step {step.name}: " if step.name else ""
        folder = f"steps/{step.name}/solution" if step.name else "solution"
        if not step.solution.get("solve.sh", b"").strip():
            add(
                "required_file",
                f"{where}missing or empty {folder}/solve.sh: gold verification runs the oracle solution",
            )
        if "test.sh" in step.tests:
            probs.extend(_reward_problems(step.tests, where))
    sizes = {p: len(b) for p, b in bundle.files.items()}
    for p, n in sizes.items():
        if n > lim.max_file_bytes:
            add("size", f"{p} has {n} bytes (limit {lim.max_file_bytes}); use smaller fixtures")
    if sum(sizes.values()) > lim.max_total_bytes or len(sizes) > lim.max_files:
        add(
            "size",
            f"bundle has {len(sizes)} files, {sum(sizes.values())} bytes (limits {lim.max_files}, {lim.max_total_bytes})",
        )
    probs.extend(_isolation(bundle))
    if seed is not None:
        probs.extend(_against_seed(bundle, seed, edit_mask, lim))
    missing_skills = sorted(required_skills - bundle.skills)
    if missing_skills:
        add("skills", f"metadata.skills lacks required skill(s) {', '.join(missing_skills)} of the skill contract")
    return probs


def _reward_problems(tests: dict[str, bytes], where: str) -> list[Problem]:
    """test.sh must write a reward on pass and on fail (echo/printf of 1 and 0, a computed value, or
    a reward.json written by a helper)."""
    vals = _reward_values(tests["test.sh"].decode(errors="replace"))
    if not vals and not any(b"reward" in data.lower() for data in tests.values()):
        msg = "tests/test.sh never writes the reward; write 1 on pass and 0 on fail to /logs/verifier/reward.txt"
        return [Problem("reward", where + msg)]
    if vals and not ({"0", "1"} <= vals or any("$" in v for v in vals)):
        missing = "0 on failure" if "0" not in vals else "1 on success"
        return [Problem("reward", f"{where}tests/test.sh never writes {missing} to the reward file")]
    return []


_TB1_NAMES = {"solution.sh": "solution", "solution.yaml": "solution", "run-tests.sh": "tests"}
"""A Terminal-Bench 1 task's own solution and test script: its Dockerfile's build context was the task folder."""


def copied_files(bundle: Bundle) -> list[tuple[int, str, list[str]]]:
    """What environment/Dockerfile copies from its build context (environment/): (line, source as
    written, the bundle paths it copies); a source the context does not hold copies nothing. `COPY
    --from` (another stage) and URLs are not the context's."""
    docker = bundle.files.get("environment/Dockerfile", b"").decode(errors="replace")
    out = []
    for item in dockerfile_lines(docker):
        m = re.match(r"\s*(COPY|ADD)\s+(.*)", item.text, re.I | re.S)
        if not m or item.heredocs or re.search(r"--from[= ]", m.group(2)):
            continue
        try:
            args = [a for a in shlex.split(m.group(2)) if not a.startswith("--")]
        except ValueError:
            continue
        for src in args[:-1]:
            if "://" in src:
                continue
            rel = posixpath.normpath(src.lstrip("/")) if src.strip("/.") else "."
            base = "environment" if rel == "." else f"environment/{rel}"
            paths = [
                p
                for p in bundle.files
                if p.startswith("environment/")
                and (fnmatch.fnmatchcase(p, base) or p.startswith(base.rstrip("/") + "/") or base == "environment")
            ]
            out.append((item.n, src, paths))
    return out


def _isolation(bundle: Bundle) -> list[Problem]:
    """The Dockerfile copies the solution or the tests into the agent's image: a source that names them
    (`solution/`, `tests/`, `../solution`, a Terminal-Bench 1 task's solution.sh or run-tests.sh), or a
    copied file that is the oracle's or the verifier's script (a `solve.sh`, `test.sh` or
    `run-tests.sh`) or one of the tests' test files (pytest's `test_*.py`, `*_test.py`, `conftest.py`).
    Files of environment/ that the Dockerfile does not copy are not in the image; a starter file the
    solution also ships unchanged (a `go.mod`) is not the solution."""
    scripts = {
        hashlib.sha256(b).digest(): p
        for p, b in bundle.files.items()
        if b.strip()
        and (p.startswith(("solution/", "tests/")) or "/solution/" in p or "/tests/" in p)
        and not p.startswith("environment/")
        and re.search(r"(?:^|/)(?:solve\.sh|test\.sh|run-tests\.sh|test_[^/]*\.py|[^/]*_test\.py|conftest\.py)$", p)
    }
    tb1 = bundle.metadata.get("source_format") == "terminal-bench-1"
    probs = []
    for n, src, paths in copied_files(bundle):
        top = (PurePosixPath(posixpath.normpath(src)).parts or ("",))[0]
        names_them = top in ("solution", "tests", "..") or (tb1 and top in _TB1_NAMES)
        same = sorted({scripts[d] for p in paths if (d := hashlib.sha256(bundle.files[p]).digest()) in scripts})
        if names_them and not paths:
            why = f"{src} is not in environment/ (the build context): it names the task's own solution or tests"
        elif same:
            why = f"{src} holds {', '.join(same)}"
        elif names_them and _copies_of(bundle, paths):
            why = f"{src} holds copies of the task's {top}"
        else:
            continue
        msg = f"environment/Dockerfile line {n} copies the solution or the tests into the image: {why}"
        probs.append(Problem("isolation", msg))
    return probs


def _copies_of(bundle: Bundle, paths: list[str]) -> bool:
    """Whether copied files hold what the task's solution or tests hold."""
    secret = {
        bundle.files[p] for p in bundle.files if p.startswith(("solution/", "tests/")) and bundle.files[p].strip()
    }
    return any(bundle.files[p] in secret for p in paths)


def _against_seed(bundle: Bundle, seed: Bundle, mask: frozenset[str], lim: CheckLimits) -> list[Problem]:
    probs = []
    if bundle.digest() == seed.digest():
        return [Problem("overlap", "the bundle is a copy of its seed")]
    for letter in sorted(mask):
        if bundle.part(letter) == seed.part(letter):
            name = {"I": "instruction", "D": "fixtures", "S": "solution", "T": "tests", "E": "environment"}[letter]
            probs.append(Problem("edit_mask", f"the action must change the {name} ({letter}) but it equals the seed's"))
    share = overlap(bundle, seed)
    if share > lim.max_overlap:
        probs.append(
            Problem(
                "overlap",
                f"{share:.0%} of the bundle's lines are copied from the seed (limit "
                f"{lim.max_overlap:.0%}); change the task, its data and its tests",
            )
        )
    return probs


def _lines(files: dict[str, bytes]) -> list[bytes]:
    return [ln.strip() for data in files.values() for ln in data.splitlines() if ln.strip()]


def overlap(bundle: Bundle, seed: Bundle) -> float:
    """Mean over instruction, fixtures, solution and tests of the share of the bundle's non-blank lines
    found verbatim in the same part of the seed (1.0 for a copy)."""
    shares = []
    for letter in "IDST":
        mine, theirs = _lines(bundle.part(letter)), set(_lines(seed.part(letter)))
        shares.append(sum(1 for ln in mine if ln in theirs) / len(mine) if mine else 1.0)
    return sum(shares) / len(shares)


# -- tests the solution can tamper with ----------------------------------------------------------------
_TESTS_DIRS = ("/tests", "$TEST_DIR", "${TEST_DIR}", "$TESTS_DIR", "${TESTS_DIR}")
_HOME = ("~", "$HOME", "${HOME}", "/root")


def _workdir(bundle: Bundle) -> str:
    workdir = "/app"
    for item in dockerfile_lines(bundle.files.get("environment/Dockerfile", b"").decode(errors="replace")):
        m = re.match(r"\s*WORKDIR\s+(\S+)", item.text, re.I)
        if m:
            workdir = posixpath.normpath(posixpath.join(workdir, m.group(1)))
    return bundle.config.environment.workdir or workdir


def _writable(path: str, cwd_writable: bool, workdir: str) -> bool:
    """Whether the solution can write `path` (as the tests see it): below the working folder, HOME or a
    temporary folder, or relative to a working directory it can write."""
    path = path.strip("'\"")
    if path.startswith(_TESTS_DIRS):
        return False
    if path.startswith(("/", "~", "$")):
        roots = (workdir, *_HOME, "/tmp", "/var/tmp", "$PWD", "${PWD}", "$(pwd)", "$APP_DIR", "${APP_DIR}")
        return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)
    return cwd_writable


_PYTEST_VALUE_OPTIONS = {
    "-k", "-m", "-p", "-c", "-o", "-n", "-W", "--ctrf", "--junitxml", "--junit-xml", "--rootdir", "--confcutdir",
    "--tb", "--timeout", "--maxfail", "--deselect", "--ignore", "--log-file", "--basetemp", "--durations",
    "--json-report-file", "--html", "--cov", "--cov-report", "--import-mode",
}  # fmt: skip


def tamper_warnings(bundle: Bundle) -> list[Problem]:
    """Tests that import or run what the solution can change (code `tamper`): pytest on a test file in a
    folder the solution can write (a planted conftest.py, or a pytest.ini naming a plugin, runs inside
    the tests), `python -m` (pytest or any module) or `python -c` from such a folder (it is first on the
    import path: a planted pytest.py or json.py is imported instead), `uv run` there (uv installs the
    project it finds there), PYTHONPATH naming one, a script run from one, and `source` / `.` of a file in one (uv's `$HOME/.local/bin/env`
    included: the solution's HOME is the tests'). Folders the solution can write: the working folder,
    HOME and the temporary folders; a file the test script itself writes first is its own. Harbor runs
    the tests in the agent's container after it, so these hold there too."""
    workdir = _workdir(bundle)
    probs: list[Problem] = []
    for step in bundle.steps:
        for name, data in sorted(step.tests.items()):
            if name.endswith(".py"):
                where = f"{'steps/' + step.name + '/' if step.name else ''}tests/{name}"
                probs += [Problem("tamper", f"{where} line {n}: {why}") for n, why in deserialisers(data)]
            if not name.endswith(".sh"):
                continue
            where = f"{'steps/' + step.name + '/' if step.name else ''}tests/{name}"
            cwd_writable = True  # Harbor runs test.sh from the working folder
            own: set[str] = set()
            text = data.decode("utf-8", errors="replace")
            lines = text.splitlines()
            for n, cmd in script_commands(text):
                for why in _tamper(cmd.words, cwd_writable, workdir, own):
                    shown = lines[n - 1].strip() if n <= len(lines) else ""
                    probs.append(Problem("tamper", f"{where} line {n}: `{shown}` {why}"))
                own |= {
                    posixpath.normpath(t) for op, t in cmd.redirects if op.lstrip("0123456789&").startswith(">") and t
                }
                words = [w for w in cmd.words if not re.fullmatch(r"[A-Za-z_]\w*=.*", w)]
                if words[:1] in (["cp"], ["mv"]) and len(words) > 2:
                    own.add(posixpath.normpath(words[-1]))
                if words[:1] == ["cd"]:
                    target = words[1] if len(words) > 1 else "~"
                    if target.startswith(("/", "$", "~")):  # a relative one stays where it was
                        cwd_writable = _writable(target, False, workdir)
    return probs


_DESERIALISERS = re.compile(
    r"\bpickle\.loads?\(|\bpickle\.Unpickler\(|\bread_pickle\(|\btorch\.load\(|\byaml\.unsafe_load(_all)?\("
    r"|\byaml\.load(_all)?\(.*Loader\s*=\s*(yaml\.)?(Unsafe|Full)?Loader\b|allow_pickle\s*=\s*True|\bjoblib\.load\("
)


def deserialisers(data: bytes) -> list[tuple[int, str]]:
    """Lines of a tests file that read an answer with a deserialiser that runs code the data names (a pickle's
    `__reduce__`, YAML's python/object tags): the tests' process refuses a pickle's globals other than plain
    data constructors and the tests' own, but the answer's format is the task's design."""
    return [
        (
            n,
            f"`{line.strip()[:80]}` deserialises the answer with a loader that runs code the file names; "
            "store answers as JSON, CSV or numbers instead",
        )
        for n, line in enumerate(data.decode(errors="replace").splitlines(), 1)
        if _DESERIALISERS.search(line)
    ]


def _tamper(words: list[str], cwd_writable: bool, workdir: str, own: set[str]) -> list[str]:
    out = []
    assign = re.compile(r"[A-Za-z_]\w*=.*")
    env = {w.split("=", 1)[0]: w.split("=", 1)[1] for w in words if assign.fullmatch(w)}
    words = [w for w in words if not assign.fullmatch(w)]
    if words[:1] == ["export"]:
        env |= {w.split("=", 1)[0]: w.split("=", 1)[1] for w in words[1:] if "=" in w}
        words = []
    for part in env.get("PYTHONPATH", "").split(":") if "PYTHONPATH" in env else []:
        if part in ("", ".") or _writable(part, cwd_writable, workdir):
            out.append(f"puts {part or 'the working directory'} on PYTHONPATH, a folder the solution can write")
            break
    if not words:
        return out
    cmd, args = words[0], words[1:]
    changeable = lambda p: p not in own and _writable(p, cwd_writable, workdir)
    if cmd in ("source", ".") and args and changeable(args[0]):
        out.append(f"sources {args[0]}, which the solution can change (it runs inside the tests)")
    if cmd in ("bash", "sh") and args and not args[0].startswith("-") and changeable(args[0]):
        out.append(f"runs {args[0]}, which the solution can change")
    elif "/" in cmd and changeable(cmd):
        out.append(f"runs {cmd}, which the solution can change")
    pytest_args: list[str] | None = None
    if cmd in ("pytest", "py.test"):
        pytest_args = args
    elif re.fullmatch(r"python[\d.]*", cmd):
        if args[:1] == ["-m"] and len(args) > 1:
            if cwd_writable:
                out.append(
                    f"runs `{cmd} -m {args[1]}` from a folder the solution can write (first on the import path: "
                    f"a planted {args[1]}.py, or any module the tests import, is used instead)"
                )
            pytest_args = args[2:] if args[1] == "pytest" else None
        elif args[:1] == ["-c"] and cwd_writable:
            out.append(f"runs `{cmd} -c` from a folder the solution can write (first on the import path)")
        elif args and not args[0].startswith("-") and changeable(args[0]):
            out.append(f"runs {args[0]}, which the solution can change (its folder is first on the import path)")
    elif cmd in ("uv", "uvx") and "pytest" in args:
        pytest_args = args[args.index("pytest") + 1 :]
        if cmd == "uv" and args[:1] == ["run"] and cwd_writable:
            out.append("runs `uv run` in a folder the solution can write (uv installs the project it finds there)")
    if pytest_args is not None:
        paths, skip = [], False
        for a in pytest_args:
            if skip:
                skip = False
            elif a.startswith("-"):
                skip = a in _PYTEST_VALUE_OPTIONS
            else:
                paths.append(a)
        planted = [p for p in paths if _writable(p, cwd_writable, workdir)]
        if planted or (not paths and cwd_writable):
            at = planted[0] if planted else "the working directory"
            out.append(
                f"runs pytest on {at}, in a folder the solution can write"
                " (a planted conftest.py runs there, a planted pytest.ini names its plugins)"
            )
    return out
