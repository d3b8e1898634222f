"""Environment bundles in the Harbor / Terminal-Bench 2 layout, and their static checks.

    <name>/instruction.md          what the agent is asked to do (states every value the tests check)
    <name>/task.toml               [metadata] (difficulty, skills, ...), [verifier], [agent], [environment]
    <name>/environment/Dockerfile  the agent's environment, plus fixture files beside it
    <name>/solution/solve.sh       the oracle solution (never copied into the agent's environment)
    <name>/tests/test.sh           runs the tests, writes 1 or 0 to the reward file
    <name>/tests/test_outputs.py   the tests

Scripts find their places through environment variables with Harbor's defaults: APP_DIR (/app, the
agent's working directory), TESTS_DIR (/tests) and REWARD_FILE (/logs/verifier/reward.txt).

A bundle is also one JSON object {task_name, instruction_md, files: {path: text}, metadata}: the form
generators answer in (binary files as {"base64": ...}).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import tomllib
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tempering.config import Schema
from tempering.errors import UserError

REQUIRED_FILES = ("environment/Dockerfile", "solution/solve.sh", "tests/test.sh", "tests/test_outputs.py")
PART_DIRS = ("environment", "solution", "tests")
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}$")


class VerifierSection(BaseModel):
    model_config = ConfigDict(extra="allow")
    timeout_sec: float = Field(120.0, gt=0, description="Seconds test.sh may run.")


class AgentSection(BaseModel):
    model_config = ConfigDict(extra="allow")
    timeout_sec: float = Field(600.0, gt=0, description="Seconds the agent may work.")


class EnvironmentSection(BaseModel):
    model_config = ConfigDict(extra="allow")
    docker_image: str | None = Field(None, description="Prebuilt image instead of environment/Dockerfile.")
    build_timeout_sec: float = Field(600.0, gt=0, description="Seconds the image build may take.")
    cpus: float = Field(1, gt=0, description="CPUs of the environment.")
    memory_mb: int = Field(2048, gt=0, description="Memory of the environment.")
    storage_mb: int = Field(10240, gt=0, description="Disk of the environment.")
    allow_internet: bool = Field(False, description="Whether the environment may reach the network.")


class TaskConfig(BaseModel):
    """task.toml; unknown keys are kept (Harbor ignores them too)."""

    model_config = ConfigDict(extra="allow")
    version: str = "1.0"
    metadata: dict[str, Any] = Field(default_factory=dict)
    verifier: VerifierSection = Field(default_factory=VerifierSection)
    agent: AgentSection = Field(default_factory=AgentSection)
    environment: EnvironmentSection = Field(default_factory=EnvironmentSection)


@dataclass
class Bundle:
    """One environment: instruction, config and the files under environment/, solution/ and tests/."""

    name: str
    """Task name (the folder name): lowercase letters, digits, `.`, `_`, `-`."""
    instruction: str
    """instruction.md."""
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
            env = json.dumps(self.config.environment.model_dump(), sort_keys=True).encode()
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
        cfg = self.config.model_dump(exclude={"metadata"}, exclude_none=True)
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
            except tomllib.TOMLDecodeError as e:
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


def _pydantic_msg(e: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors())


# -- disk ------------------------------------------------------------------------------------------
def read_bundle(path: str | Path) -> Bundle:
    """Read a bundle folder; symlinks and unreadable configs are errors (UserError)."""
    root = Path(path)
    if not root.is_dir():
        raise UserError(f"{root} is not a bundle folder (it should hold instruction.md and task.toml)")
    for need in ("instruction.md", "task.toml"):
        if not (root / need).is_file():
            raise UserError(
                f"{root}: missing {need}; a bundle holds instruction.md, task.toml, environment/, solution/, tests/"
            )
    try:
        raw = tomllib.loads((root / "task.toml").read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{root / 'task.toml'}: not valid TOML ({e}); fix the file") from None
    try:
        config = TaskConfig.model_validate(raw)
    except ValidationError as e:
        raise UserError(f"{root / 'task.toml'}: {_pydantic_msg(e)}") from None
    files = {}
    for sub in PART_DIRS:
        base = root / sub
        if base.is_symlink():
            raise UserError(f"{base} is a symlink; bundles may not contain links (copy the files in)")
        if not base.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(base):
            for name in dirnames + filenames:
                full = Path(dirpath) / name
                if full.is_symlink():
                    raise UserError(f"{full} is a symlink; bundles may not contain links (copy the files in)")
            for name in filenames:
                full = Path(dirpath) / name
                files[full.relative_to(root).as_posix()] = full.read_bytes()
    return Bundle(root.name, (root / "instruction.md").read_text(), config, files)


def unsafe_path(path: str) -> str | None:
    """Why a bundle-relative path is unsafe, or None."""
    if not path or "\\" in path or "\0" in path:
        return "empty or has a backslash or NUL"
    if path.startswith("/"):
        return "is absolute"
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return "has an empty, `.` or `..` component"
    if parts[0] not in PART_DIRS or len(parts) < 2:
        return f"is not under {', '.join(d + '/' for d in PART_DIRS)}"
    return None


def write_bundle(bundle: Bundle, path: str | Path, overwrite: bool = False) -> Path:
    """Write atomically: into a temporary sibling folder, then rename into place."""
    target = Path(path)
    for p in bundle.files:
        if why := unsafe_path(p):
            raise UserError(f"bundle {bundle.name}: refusing to write {p!r}: the path {why}")
    if target.exists() and not overwrite:
        raise UserError(f"{target} exists; remove it or choose another output folder")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        (tmp / "instruction.md").write_text(bundle.instruction)
        (tmp / "task.toml").write_text(dump_toml(bundle.config.model_dump(exclude_none=True)))
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


def dump_toml(data: dict[str, Any]) -> str:
    """TOML for task.toml: scalars and lists first, then sub-tables (strings are JSON-escaped, which
    TOML basic strings accept)."""

    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, str):
            return json.dumps(v, ensure_ascii=False)
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{key(k)} = {value(x)}" for k, x in v.items()) + " }"
        raise TypeError(f"cannot write {type(v).__name__} to TOML")

    def key(k: str) -> str:
        return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else json.dumps(k)

    out: list[str] = []

    def table(prefix: str, d: dict[str, Any]) -> None:
        scalars = {k: v for k, v in d.items() if not isinstance(v, dict)}
        if prefix and (scalars or not d):
            out.append(f"\n[{prefix}]")
        out.extend(f"{key(k)} = {value(v)}" for k, v in scalars.items())
        for k, v in d.items():
            if isinstance(v, dict):
                table(f"{prefix}.{key(k)}" if prefix else key(k), v)

    table("", data)
    return "\n".join(out).lstrip("\n") + "\n"


# -- static checks ---------------------------------------------------------------------------------
@dataclass
class Problem:
    """One failed static check."""

    code: str
    """Short check name: name, required_file, path, size, reward, isolation, edit_mask, overlap, skills."""
    message: str
    """What is wrong and how to fix it."""

    def __str__(self) -> str:
        return f"[{self.code}] {self.message}"


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
    probs: list[Problem] = []
    add = lambda code, msg: probs.append(Problem(code, msg))
    if not NAME_RE.match(bundle.name or ""):
        add("name", f"task name {bundle.name!r} must be lowercase letters, digits, `.`, `_` or `-` (at most 100)")
    if not bundle.instruction.strip():
        add("instruction", "instruction.md is empty; state the task and every value the tests check")
    for p in REQUIRED_FILES:
        if not bundle.files.get(p, b"").strip():
            what = "the oracle solution" if p.startswith("solution") else p
            add("required_file", f"missing or empty {p} ({what}); every bundle needs {', '.join(REQUIRED_FILES)}")
    for p in bundle.files:
        if why := unsafe_path(p):
            add("path", f"file path {p!r} {why}; use relative paths inside the bundle")
    sizes = {p: len(b) for p, b in bundle.files.items()}
    for p, n in sizes.items():
        if n > lim.max_file_bytes:
            add("size", f"{p} has {n} bytes (limit {lim.max_file_bytes}); use smaller fixtures")
    if sum(sizes.values()) > lim.max_total_bytes or len(sizes) > lim.max_files:
        add(
            "size",
            f"bundle has {len(sizes)} files, {sum(sizes.values())} bytes (limits {lim.max_files}, {lim.max_total_bytes})",
        )
    if "tests/test.sh" in bundle.files:
        vals = _reward_values(bundle.text("tests/test.sh"))
        if not vals:
            add("reward", "tests/test.sh never writes the reward file; write 1 on pass and 0 on fail to $REWARD_FILE")
        elif not ({"0", "1"} <= vals or any("$" in v for v in vals)):
            missing = "0 on failure" if "0" not in vals else "1 on success"
            add("reward", f"tests/test.sh never writes {missing}; write 1 on pass and 0 on fail to $REWARD_FILE")
    probs.extend(_isolation(bundle))
    if seed is not None:
        probs.extend(_against_seed(bundle, seed, edit_mask, lim))
    missing_skills = sorted(required_skills - bundle.skills)
    if missing_skills:
        add("skills", f"metadata.skills lacks required skill(s) {', '.join(missing_skills)} of the skill contract")
    return probs


def _isolation(bundle: Bundle) -> list[Problem]:
    probs = []
    secret = {
        hashlib.sha256(b).digest()
        for p, b in bundle.files.items()
        if p.startswith(("solution/", "tests/")) and b.strip()
    }
    for p, b in bundle.files.items():
        if p.startswith("environment/"):
            if (
                PurePosixPath(p).name in ("solve.sh", "test.sh", "test_outputs.py")
                or hashlib.sha256(b).digest() in secret
            ):
                probs.append(
                    Problem(
                        "isolation", f"{p} copies the solution or the tests into the agent's environment; remove it"
                    )
                )
    docker = bundle.files.get("environment/Dockerfile", b"").decode(errors="replace")
    for n, line in enumerate(docker.splitlines(), 1):
        if re.match(r"\s*(COPY|ADD)\b", line, re.I) and re.search(r"solution|tests/|solve\.sh|test_outputs", line):
            probs.append(
                Problem("isolation", f"environment/Dockerfile line {n} copies the solution or tests into the image")
            )
    return probs


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
