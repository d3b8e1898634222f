"""Static checks of synthesised bundles: Harbor's own rules, plus what synthesis needs (an oracle per step,
a reward on pass and fail, the solution and tests kept out of the image, bounds, and distance from the seed).
"""

from __future__ import annotations

import hashlib
import re
import shlex
from pathlib import PurePosixPath

from pydantic import Field

from tempering.config import Schema
from tempering.envs.terminal.bundle import Bundle, Problem, harbor_problems


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


def _isolation(bundle: Bundle) -> list[Problem]:
    probs = []
    secret = {
        hashlib.sha256(b).digest()
        for p, b in bundle.files.items()
        if p.startswith(("solution/", "tests/")) or "/solution/" in p or "/tests/" in p
        if b.strip()
    }
    for p, b in bundle.files.items():
        if p.startswith("environment/"):
            if PurePosixPath(p).name in ("solve.sh", "test.sh") or hashlib.sha256(b).digest() in secret:
                msg = f"{p} copies the solution or the tests into the agent's environment; remove it"
                probs.append(Problem("isolation", msg))
    docker = bundle.files.get("environment/Dockerfile", b"").decode(errors="replace").replace("\\\n", " ")
    for n, line in enumerate(docker.splitlines(), 1):
        m = re.match(r"\s*(COPY|ADD)\s+(.*)", line, re.I)
        if not m:
            continue
        try:
            args = [a for a in shlex.split(m.group(2)) if not a.startswith("--")]
        except ValueError:
            continue
        for src in args[:-1]:  # the build context is environment/: only a path out of it reaches the task's parts
            parts = [x for x in PurePosixPath(src).parts if x not in (".", "..")]
            if (parts and parts[0] in ("solution", "tests")) or PurePosixPath(src).name in ("solve.sh", "test.sh"):
                msg = f"environment/Dockerfile line {n} copies the solution or tests into the image ({src})"
                probs.append(Problem("isolation", msg))
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
