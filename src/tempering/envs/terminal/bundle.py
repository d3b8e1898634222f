"""Harbor task bundles: the format, reading and writing them, and the rules Harbor itself applies.

    <name>/instruction.md          the task (optional for multi-step tasks: each step has its own)
    <name>/task.toml               schema_version, [task], [metadata], [verifier], [agent], [environment],
                                   [solution], multi_step_reward_strategy, [[steps]]
    <name>/environment/Dockerfile  the agent's environment, fixtures beside it (not needed with docker_image)
    <name>/solution/solve.sh       the oracle solution (Harbor runs it at /solution; never in the image)
    <name>/tests/test.sh           the verifier, run from /tests; writes /logs/verifier/reward.txt (one
                                   number) or reward.json (an object of named numbers)
    <name>/steps/<step>/           multi-step tasks: instruction.md, tests/ (laid over the task's tests/),
                                   solution/
    anything else                  kept as it is (README.md, trajectory.json, ...)

Terminal-Bench 1 folders (task.yaml, Dockerfile, solution.sh, run-tests.sh, tests/) are converted on
read, as Harbor's own mapper does: the exit status of run-tests.sh becomes the reward.

A bundle is also one JSON object {task_name, instruction_md, files: {path: text}, metadata, task}: the
form generators answer in (binary files as {"base64": ...}).
"""

from __future__ import annotations

import ast
import base64
import hashlib
import json
import os
import re
import shutil
import statistics
import tempfile
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal

import tomli_w
import tomllib
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tempering.errors import UserError

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}$")
STEP_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
PACKAGE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
NetworkMode = Literal["public", "no-network", "allowlist"]


# -- task.toml -------------------------------------------------------------------------------------
class _Section(BaseModel):
    """A task.toml table; keys it does not know are kept and written back (Harbor ignores them too)."""

    model_config = ConfigDict(extra="allow")


class _Network(_Section):
    network_mode: NetworkMode | None = Field(None, description="public, no-network or allowlist.")
    allowed_hosts: list[str] | None = Field(None, description="Hosts reachable when network_mode = allowlist.")

    @model_validator(mode="after")
    def _hosts_need_allowlist(self):
        if self.allowed_hosts is not None and self.network_mode != "allowlist":
            raise ValueError("allowed_hosts is only valid with network_mode = 'allowlist'")
        return self


class VerifierSection(_Network):
    timeout_sec: float = Field(600.0, gt=0, description="Seconds test.sh may run.")
    env: dict[str, str] = Field(default_factory=dict, description="Variables the tests see.")
    user: str | int | None = None


class AgentSection(_Network):
    timeout_sec: float | None = Field(None, gt=0, description="Seconds the agent may work (None: no limit).")
    user: str | int | None = None


class SolutionSection(_Section):
    env: dict[str, str] = Field(default_factory=dict, description="Variables the oracle solution sees.")


def parse_size_mb(text: str) -> int:
    """Harbor's legacy sizes: `4G`, `512M`, `1024K` -> MiB."""
    s = str(text).strip().upper()
    units = {"G": 1024, "M": 1, "K": 1 / 1024}
    if not s or s[-1] not in units:
        raise ValueError(f"size {text!r} must look like '4G', '512M' or '1024K'")
    return int(float(s[:-1]) * units[s[-1]])


class EnvironmentSection(_Section):
    build_timeout_sec: float = Field(600.0, gt=0, description="Seconds the image build may take.")
    docker_image: str | None = Field(None, description="Prebuilt image instead of environment/Dockerfile.")
    os: Literal["linux", "windows"] = "linux"
    cpus: int | None = Field(None, gt=0, description="CPUs (None: the provider's default).")
    memory_mb: int | None = Field(None, gt=0, description="Memory in MiB (None: the provider's default).")
    storage_mb: int | None = Field(None, gt=0, description="Disk in MiB (None: the provider's default).")
    gpus: int | None = None
    network_mode: NetworkMode = Field("public", description="Network of the environment (Harbor: public).")
    allowed_hosts: list[str] | None = None
    env: dict[str, str] = Field(
        default_factory=dict, description="Variables, `${VAR}` / `${VAR:-default}` from the host."
    )
    workdir: str | None = Field(None, description="Working folder, instead of the image's WORKDIR.")

    @model_validator(mode="before")
    @classmethod
    def _legacy_fields(cls, data: Any) -> Any:
        """`memory`/`storage` strings and `allow_internet` become memory_mb/storage_mb/network_mode, as in
        Harbor; they are never written back."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for old, new in (("memory", "memory_mb"), ("storage", "storage_mb")):
            if old in data:
                mb = parse_size_mb(data.pop(old))
                if new in data and data[new] != mb:
                    raise ValueError(f"conflicting {old} ({mb} MB) and {new} ({data[new]} MB): keep one")
                data[new] = mb
        allow = data.pop("allow_internet", None)
        if allow is not None and "network_mode" not in data and "allowed_hosts" not in data:
            data["network_mode"] = "public" if allow else "no-network"
        return data

    @model_validator(mode="after")
    def _hosts_need_allowlist(self):
        if self.allowed_hosts is not None and self.network_mode != "allowlist":
            raise ValueError("allowed_hosts is only valid with network_mode = 'allowlist'")
        return self


class StepSection(_Section):
    name: str
    agent: AgentSection = Field(default_factory=AgentSection)
    verifier: VerifierSection = Field(default_factory=VerifierSection)
    min_reward: float | dict[str, float] | None = Field(
        None, description="Stop after this step when its rewards fall below this (a number gates `reward`)."
    )


class TaskConfig(_Section):
    """task.toml, in Harbor's current schema; values equal to Harbor's defaults are not written out."""

    schema_version: str = "1.1"
    task: dict[str, Any] | None = Field(None, description="Package info: name ('org/name'), description, ...")
    metadata: dict[str, Any] = Field(default_factory=dict)
    verifier: VerifierSection = Field(default_factory=VerifierSection)
    agent: AgentSection = Field(default_factory=AgentSection)
    environment: EnvironmentSection = Field(default_factory=EnvironmentSection)
    solution: SolutionSection = Field(default_factory=SolutionSection)
    source: str | None = None
    multi_step_reward_strategy: Literal["mean", "final"] | None = None
    steps: list[StepSection] | None = None
    artifacts: list[Any] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _version_rename(cls, data: Any) -> Any:
        if isinstance(data, dict) and "version" in data:
            data = dict(data)
            data.setdefault("schema_version", str(data.pop("version")))
        return data

    def to_toml(self) -> str:
        data = self.model_dump(mode="json", exclude_defaults=True)
        data = {"schema_version": self.schema_version, **data}
        for key in ("task", "metadata", "verifier", "agent", "environment", "solution"):
            if data.get(key) == {}:
                del data[key]
        return tomli_w.dumps(data)


# -- the bundle ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Step:
    """One step of a task (a single-step task has one, named "")."""

    name: str
    instruction: str
    tests: dict[str, bytes]
    """Files under /tests: the task's tests/ with the step's own tests/ laid over them."""
    solution: dict[str, bytes]
    """Files under /solution."""
    agent_timeout_s: float | None
    verifier_timeout_s: float
    verifier_env: dict[str, str]
    min_reward: float | dict[str, float] | None = None


@dataclass
class Bundle:
    """One task: instruction, config and every other file of the folder."""

    name: str
    """Task name (the folder name): lowercase letters, digits, `.`, `_`, `-`."""
    instruction: str
    """instruction.md ("" when a multi-step task has none)."""
    config: TaskConfig = field(default_factory=TaskConfig)
    """task.toml."""
    files: dict[str, bytes] = field(default_factory=dict)
    """Every other file, by bundle-relative POSIX path (`environment/data.csv`, `tests/test.sh`, ...)."""

    @property
    def metadata(self) -> dict[str, Any]:
        return self.config.metadata

    @property
    def skills(self) -> frozenset[str]:
        return frozenset(self.metadata.get("skills", []))

    def text(self, path: str) -> str:
        return self.files[path].decode("utf-8", errors="replace")

    def under(self, folder: str) -> dict[str, bytes]:
        """Files below `folder`, by path relative to it."""
        pre = folder.rstrip("/") + "/"
        return {p[len(pre) :]: b for p, b in self.files.items() if p.startswith(pre)}

    @property
    def steps(self) -> list[Step]:
        """The steps in order; a single-step task is one step named ""."""
        cfg = self.config
        if not cfg.steps:
            return [
                Step(
                    "",
                    self.instruction,
                    self.under("tests"),
                    self.under("solution"),
                    cfg.agent.timeout_sec,
                    cfg.verifier.timeout_sec,
                    dict(cfg.verifier.env),
                )
            ]
        out = []
        for s in cfg.steps:
            base = f"steps/{s.name}"
            instruction = self.files.get(f"{base}/instruction.md", b"").decode("utf-8", errors="replace")
            verifier_set = s.verifier.model_fields_set
            out.append(
                Step(
                    s.name,
                    instruction,
                    {**self.under("tests"), **self.under(f"{base}/tests")},
                    self.under(f"{base}/solution"),
                    s.agent.timeout_sec if "timeout_sec" in s.agent.model_fields_set else cfg.agent.timeout_sec,
                    s.verifier.timeout_sec if "timeout_sec" in verifier_set else cfg.verifier.timeout_sec,
                    {**cfg.verifier.env, **s.verifier.env},
                    s.min_reward,
                )
            )
        return out

    def part(self, letter: str) -> dict[str, bytes]:
        """The files of one part: I instruction, D fixtures, S solution, T tests, E environment."""
        if letter == "I":
            return {"instruction.md": self.instruction.encode()}
        if letter == "D":
            return {
                p: b for p, b in self.files.items() if p.startswith("environment/") and p != "environment/Dockerfile"
            }
        if letter == "S":
            return {p: b for p, b in self.files.items() if p.startswith("solution/")}
        if letter == "T":
            return {p: b for p, b in self.files.items() if p.startswith("tests/")}
        if letter == "E":
            env = json.dumps(self.config.environment.model_dump(mode="json"), sort_keys=True).encode()
            return {
                "environment/Dockerfile": self.files.get("environment/Dockerfile", b""),
                "task.toml:environment": env,
            }
        raise ValueError(f"unknown part {letter!r}")

    def digest(self) -> str:
        """Content hash over instruction and files (not the metadata), for duplicate detection."""
        h = hashlib.sha256(self.instruction.encode())
        for p in sorted(self.files):
            h.update(p.encode() + b"\0" + self.files[p] + b"\0")
        return h.hexdigest()[:16]

    # -- the one-JSON-object form ------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        cfg = self.config.model_dump(mode="json", exclude={"metadata"}, exclude_defaults=True)
        return {
            "task_name": self.name,
            "instruction_md": self.instruction,
            "files": {p: _text_or_base64(b) for p, b in sorted(self.files.items())},
            "metadata": self.metadata,
            "task": cfg,
        }

    @classmethod
    def from_json(cls, obj: Any) -> Bundle:
        """Parse the generator's answer; raises BundleFormatError naming what is wrong."""
        if not isinstance(obj, dict):
            raise BundleFormatError(f"the answer must be one JSON object, got {type(obj).__name__}")
        missing = [k for k in ("task_name", "instruction_md", "files") if k not in obj]
        if missing:
            raise BundleFormatError(f"the JSON object misses key(s) {', '.join(missing)}")
        files = obj["files"]
        if not isinstance(files, dict):
            raise BundleFormatError("`files` must map paths to file contents")
        files = {k: _decode_file(k, v) for k, v in files.items()}
        task = dict(obj.get("task") or {})
        if "task.toml" in files:
            try:
                task = {**tomllib.loads(files.pop("task.toml").decode()), **task}
            except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
                raise BundleFormatError(f"task.toml is not valid TOML: {e}") from None
        files.pop("instruction.md", None)
        metadata = obj.get("metadata") or task.pop("metadata", {}) or {}
        if not isinstance(metadata, dict):
            raise BundleFormatError("`metadata` must be a JSON object")
        try:
            config = TaskConfig.model_validate({**task, "metadata": metadata})
        except ValidationError as e:
            raise BundleFormatError(f"task settings are invalid: {_pydantic_msg(e)}") from None
        if not isinstance(obj["task_name"], str) or not isinstance(obj["instruction_md"], str):
            raise BundleFormatError("`task_name` and `instruction_md` must be strings")
        return cls(obj["task_name"], obj["instruction_md"], config, files)


def _text_or_base64(data: bytes) -> str | dict[str, str]:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode()}


def _decode_file(path: Any, value: Any) -> bytes:
    """A file's content in the JSON form: text, or {"base64": ...} for binary files."""
    if not isinstance(path, str):
        raise BundleFormatError(f"file path {path!r} must be a string")
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, dict) and isinstance(value.get("base64"), str):
        try:
            return base64.b64decode(value["base64"], validate=True)
        except ValueError:
            raise BundleFormatError(f"file {path}: `base64` is not valid base64") from None
    raise BundleFormatError(f'file {path}: content must be a string (or {{"base64": ...}} for binary data)')


class BundleFormatError(ValueError):
    """A generator answer that cannot be turned into a bundle (shown to the repair prompt)."""


class BundleError(UserError):
    """A folder that cannot be read as a task; `reason` is a short label for tables."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def _pydantic_msg(e: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, err['loc'])) or 'task'}: {err['msg']}" for err in e.errors())


def rewards_score(rewards: dict[str, float]) -> float:
    """One number from a reward file: `reward` when present (Harbor's key), else the mean of the values."""
    return float(rewards["reward"]) if "reward" in rewards else statistics.fmean(rewards.values())


_OPTIONAL = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})
_LOADERS = frozenset({"import_module", "__import__", "spec_from_file_location", "SourceFileLoader", "load_source"})
"""Calls that load a module by the name in their first argument."""
_SHELL_IMPORT = re.compile(
    r"(?m)(?:^|[;\"'(]|-c\s)\s*(?:from\s+([A-Za-z_][\w.]*)\s+import\b|import\s+([A-Za-z_][\w.]*(?:\s*,\s*[A-Za-z_][\w.]*)*))"
)


def required_imports(tests: dict[str, bytes]) -> frozenset[str]:
    """The top-level module names the task's tests require: what their Python files import outside a
    `try` that catches ImportError (an optional import falls back to what is installed), or load by a
    literal name (`importlib.import_module("name")`, `spec_from_file_location("name", path)`); and every import statement in their other scripts (test.sh's
    `python3 -c` or heredocs). Only these may come from the solution's working folder in the tests'
    process (`injob/guard.py`): the list is fixed by the task, never by the candidate."""
    names: set[str] = set()

    def visit(node: ast.AST, optional: bool) -> None:
        if isinstance(node, ast.Try):
            catches = {
                n.id if isinstance(n, ast.Name) else getattr(n, "attr", "")
                for h in node.handlers
                for n in ([h.type] if not isinstance(h.type, ast.Tuple) else h.type.elts)
                if n is not None
            }
            bare = any(h.type is None for h in node.handlers)
            for stmt in node.body:
                visit(stmt, optional or bare or bool(catches & _OPTIONAL))
            for part in [*node.handlers, *node.orelse, *node.finalbody]:
                visit(part, optional)
            return
        if not optional:
            if isinstance(node, ast.Import):
                names.update(a.name.partition(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.partition(".")[0])
            elif (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", getattr(node.func, "id", "")) in _LOADERS
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                names.add(node.args[0].value.partition(".")[0])
        for child in ast.iter_child_nodes(node):
            visit(child, optional)

    for path, raw in tests.items():
        text = raw.decode(errors="replace")
        if path.endswith(".py"):
            try:
                visit(ast.parse(text), False)
                continue
            except SyntaxError:
                pass
        for m in _SHELL_IMPORT.finditer(text):
            names.update(n.strip().partition(".")[0] for n in (m.group(1) or m.group(2)).split(","))
    return frozenset(n for n in names if n.isidentifier())


# -- Harbor's own rules ----------------------------------------------------------------------------
@dataclass
class Problem:
    """One failed check."""

    code: str
    """Short check name (Harbor's rules: name, layout, steps, path; synthesis adds more)."""
    message: str
    """What is wrong and how to fix it."""

    def __str__(self) -> str:
        return f"[{self.code}] {self.message}"


def unsafe_path(path: str) -> str | None:
    """Why a bundle-relative path is unsafe, or None."""
    if not path or "\\" in path or "\0" in path:
        return "is empty or has a backslash or NUL"
    if path.startswith("/"):
        return "is absolute"
    if any(p in ("", ".", "..") for p in path.split("/")):
        return "has an empty, `.` or `..` component"
    if path in ("instruction.md", "task.toml"):
        return "is the instruction or the config, which are not files of the bundle's `files`"
    return None


def harbor_problems(bundle: Bundle) -> list[Problem]:
    """What Harbor's loader would refuse (an empty list: Harbor runs it)."""
    probs: list[Problem] = []
    add = lambda code, msg: probs.append(Problem(code, msg))
    cfg = bundle.config
    if not NAME_RE.match(bundle.name or ""):
        add("name", f"task name {bundle.name!r} must be lowercase letters, digits, `.`, `_` or `-` (at most 100)")
    pkg = (cfg.task or {}).get("name")
    if cfg.task is not None and not (isinstance(pkg, str) and PACKAGE_NAME_RE.match(pkg) and ".." not in pkg):
        add("name", f"[task] name {pkg!r} must be 'org/name'")
    for p in bundle.files:
        if why := unsafe_path(p):
            add("path", f"file path {p!r} {why}")
    image_files = ("environment/Dockerfile", "environment/docker-compose.yaml", "environment/docker-compose.yml")
    if cfg.environment.docker_image is None and not any(p in bundle.files for p in image_files):
        add("layout", "no environment/Dockerfile and no [environment] docker_image: say how to build the environment")
    if cfg.steps:
        names = [s.name for s in cfg.steps]
        for s in cfg.steps:
            if not STEP_NAME_RE.match(s.name) or names.count(s.name) > 1:
                add("steps", f"step name {s.name!r} must be unique: letters, digits, `.`, `_`, `-`")
            if not bundle.files.get(f"steps/{s.name}/instruction.md", b"").strip():
                add("steps", f"step {s.name!r} has no steps/{s.name}/instruction.md")
            if f"steps/{s.name}/tests/test.sh" not in bundle.files and "tests/test.sh" not in bundle.files:
                add("steps", f"step {s.name!r} has no test.sh (steps/{s.name}/tests/ or tests/)")
    else:
        if not bundle.instruction.strip():
            add("layout", "instruction.md is missing or empty; state the task and every value the tests check")
        if "tests/test.sh" not in bundle.files:
            add("layout", "no tests/test.sh: Harbor runs it to decide the reward")
    return probs


# -- disk ------------------------------------------------------------------------------------------
def is_task_folder(path: Path) -> bool:
    return (path / "task.toml").is_file() or (path / "task.yaml").is_file()


def _walk(root: Path, skip: Collection[str] = frozenset()) -> dict[str, bytes]:
    """Every file under root by relative POSIX path; symlinks are errors."""
    files = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = Path(dirpath) / name
            if full.is_symlink():
                raise BundleError("symlink", f"{full} is a symlink; bundles may not contain links (copy the files in)")
        for name in filenames:
            rel = (Path(dirpath) / name).relative_to(root).as_posix()
            if rel not in skip:
                files[rel] = (Path(dirpath) / name).read_bytes()
    return files


def read_bundle(path: str | Path) -> Bundle:
    """Read a Harbor task folder, or a Terminal-Bench 1 one (converted); BundleError names the problem."""
    root = Path(path)
    if not root.is_dir():
        raise BundleError("not a folder", f"{root} is not a task folder (it should hold task.toml)")
    if (root / "task.toml").is_file():
        return _read_harbor(root)
    if (root / "task.yaml").is_file():
        return _read_terminal_bench_1(root)
    raise BundleError(
        "not a task folder",
        f"{root} holds neither task.toml (a Harbor task) nor task.yaml (a Terminal-Bench 1 task)",
    )


def _read_harbor(root: Path) -> Bundle:
    try:
        raw = tomllib.loads((root / "task.toml").read_text())
        config = TaskConfig.model_validate(raw)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise BundleError("invalid task.toml", f"{root / 'task.toml'}: not valid TOML ({e}); fix the file") from None
    except ValidationError as e:
        raise BundleError("invalid task.toml", f"{root / 'task.toml'}: {_pydantic_msg(e)}") from None
    instruction = (root / "instruction.md").read_text() if (root / "instruction.md").is_file() else ""
    files = _walk(root, skip={"task.toml", "instruction.md"})
    return Bundle(root.name, instruction, config, files)


TB1_TEST_SH = """#!/bin/bash
# Terminal-Bench 1 tests: the exit status of run-tests.sh is the reward.
REWARD_FILE="${REWARD_FILE:-/logs/verifier/reward.txt}"
mkdir -p "$(dirname "$REWARD_FILE")"
if TEST_DIR="${TESTS_DIR:-/tests}" bash "${TESTS_DIR:-/tests}/run-tests.sh"; then
  echo 1 > "$REWARD_FILE"
else
  echo 0 > "$REWARD_FILE"
fi
"""
TB1_RUN_TESTS = '#!/bin/bash\n# Terminal-Bench 1 default: pytest on the tests\npytest "$TEST_DIR/test_outputs.py" -rA\n'


def _read_terminal_bench_1(root: Path) -> Bundle:
    """Convert a Terminal-Bench 1 task (task.yaml) to a Harbor bundle, as Harbor's mapper does."""
    try:
        tb = yaml.safe_load((root / "task.yaml").read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise BundleError("invalid task.yaml", f"{root / 'task.yaml'}: not valid YAML ({e})") from None
    if not isinstance(tb, dict):
        raise BundleError("invalid task.yaml", f"{root / 'task.yaml'}: must hold a mapping of settings")
    instruction = tb.pop("instruction", None)
    descriptions = tb.pop("descriptions", None)
    if instruction is None and isinstance(descriptions, list):  # the oldest form: [{key: base, description}]
        instruction = next((d.get("description") for d in descriptions if d.get("key") == "base"), None)
    if not isinstance(instruction, str) or not instruction.strip():
        raise BundleError("invalid task.yaml", f"{root / 'task.yaml'}: no `instruction` text")
    agent_s = tb.pop("max_agent_timeout_sec", 360.0)
    test_s = tb.pop("max_test_timeout_sec", 60.0)
    metadata = {k: v for k, v in tb.items() if v is not None}
    metadata["source_format"] = "terminal-bench-1"
    try:
        config = TaskConfig.model_validate(
            {"metadata": metadata, "agent": {"timeout_sec": agent_s}, "verifier": {"timeout_sec": test_s}}
        )
    except ValidationError as e:
        raise BundleError("invalid task.yaml", f"{root / 'task.yaml'}: {_pydantic_msg(e)}") from None
    src = _walk(root, skip={"task.yaml"})
    files: dict[str, bytes] = {}
    compose = src.pop("docker-compose.yaml", None) or src.pop("docker-compose.yml", None)
    if compose is not None:
        kept, moved = _tb1_compose(compose)
        if kept:
            files["environment/docker-compose.yaml"] = compose  # several containers: Harbor's compose mode
        elif moved and "Dockerfile" in src:
            src["Dockerfile"] = src["Dockerfile"].rstrip(b"\n") + b"\n\n# Fields moved from docker-compose.yaml\n"
            src["Dockerfile"] += "".join(f"{line}\n" for line in moved).encode()
    docker = src.get("Dockerfile", b"").decode(errors="replace")
    if re.search(r"^\s*(?:COPY|ADD)\s+(?:\./)?tests/", docker, re.M | re.I):
        files |= {f"environment/{p}": b for p, b in src.items() if p.startswith("tests/")}  # as the mapper copies them
    if "solution.sh" in src:
        files["solution/solve.sh"] = src.pop("solution.sh")
    elif "solution.yaml" in src:
        try:
            commands = [c["command"] for c in yaml.safe_load(src.pop("solution.yaml"))]
        except (yaml.YAMLError, TypeError, KeyError) as e:
            raise BundleError(
                "invalid task.yaml", f"{root / 'solution.yaml'}: expected a list of {{command: ...}} ({e})"
            ) from None
        files["solution/solve.sh"] = ("#!/bin/bash\n" + "\n".join(commands) + "\n").encode()
    files["tests/run-tests.sh"] = src.pop("run-tests.sh", TB1_RUN_TESTS.encode())
    files["tests/test.sh"] = TB1_TEST_SH.encode()
    for p, data in src.items():
        files[p if p.startswith("tests/") else f"environment/{p}"] = data
    return Bundle(root.name, instruction.rstrip("\n") + "\n", config, files)


def _tb1_compose(text: bytes) -> tuple[bool, list[str]]:
    """What Harbor's mapper makes of a Terminal-Bench 1 compose file: (whether the task keeps it, Dockerfile
    lines that carry its main service's settings). It is kept for several services, top-level settings
    (networks, volumes) or a main service with networks or dependencies; otherwise the one container is
    the Dockerfile's, with the service's environment (except TEST_DIR and `${...}` values), working_dir,
    entrypoint and exposed ports appended to it."""
    try:
        data = yaml.safe_load(text) or {}
        services = data.get("services") or {}
    except (yaml.YAMLError, AttributeError):
        return True, []
    if not isinstance(services, dict) or len(services) > 1 or set(data) - {"services", "version"}:
        return True, []
    if not services:
        return False, []
    main = services.get("client") or next(iter(services.values()))
    if not isinstance(main, dict) or {"networks", "depends_on"} & set(main):
        return True, []
    lines = []
    env = main.get("environment") or []
    items = [str(e).partition("=")[::2] for e in env] if isinstance(env, list) else list(env.items())
    lines += [f"ENV {k}={v}" for k, v in items if k != "TEST_DIR" and "TEST_DIR" not in str(v) and "${" not in str(v)]
    if isinstance(main.get("working_dir"), str) and "${" not in main["working_dir"]:
        lines.append(f"WORKDIR {main['working_dir']}")
    entry = main.get("entrypoint")
    if entry and "${" not in str(entry):
        lines.append("ENTRYPOINT " + json.dumps(entry if isinstance(entry, list) else [entry]))
    expose = main.get("expose") or []
    lines += [f"EXPOSE {p}" for p in (expose if isinstance(expose, list) else [expose]) if "${" not in str(p)]
    return False, lines


def load_bundles(source: str | Path) -> tuple[list[Bundle], dict[str, str]]:
    """One task folder, or a folder of them: (bundles Harbor would run, {folder: why not} for the rest).
    One bad folder never stops the others."""
    root = Path(source)
    if not root.is_dir():
        raise UserError(f"{root} does not exist; pass a task folder or a folder of task folders")
    dirs = [root] if is_task_folder(root) else sorted(d for d in root.iterdir() if d.is_dir() and d.name[0] != ".")
    if not dirs:
        raise UserError(f"{root} holds no task folders (each with task.toml, or task.yaml for Terminal-Bench 1)")
    loaded, rejected = [], {}
    for d in dirs:
        try:
            b = read_bundle(d)
        except BundleError as e:
            rejected[d.name] = f"{e.reason}: {e}"
            continue
        if probs := harbor_problems(b):
            rejected[d.name] = f"{probs[0].code}: " + "; ".join(p.message for p in probs)
            continue
        loaded.append(b)
    return loaded, rejected


def write_bundle(bundle: Bundle, path: str | Path, overwrite: bool = False) -> Path:
    """Write in Harbor's layout, atomically: into a temporary sibling folder, then rename into place."""
    target = Path(path)
    for p in bundle.files:
        if why := unsafe_path(p):
            raise UserError(f"bundle {bundle.name}: refusing to write {p!r}: the path {why}")
    if target.exists() and not overwrite:
        raise UserError(f"{target} exists; remove it or choose another output folder")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        tmp.chmod(0o755)  # mkdtemp's 0700 would hide the task from other users
        if bundle.instruction or not bundle.config.steps:
            (tmp / "instruction.md").write_text(bundle.instruction)
        (tmp / "task.toml").write_text(bundle.config.to_toml())
        (tmp / "environment").mkdir()  # Harbor requires the folder, even when docker_image names the image
        for p, data in bundle.files.items():
            f = tmp / PurePosixPath(p)
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_bytes(data)
            if p.endswith(".sh"):
                f.chmod(0o755)
        if target.exists():
            old = target.with_name(f".{target.name}.old")
            os.replace(target, old)
            os.replace(tmp, target)
            shutil.rmtree(old)
        else:
            os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target
