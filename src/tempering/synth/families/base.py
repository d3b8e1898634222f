"""What the built-in families share: `Params`, `Spec`, the `Family` interface, and the bundle's run
scripts and generated tests."""

from __future__ import annotations

import abc
import hashlib
import json
import random
from dataclasses import dataclass, field, replace
from typing import Any

from tempering.envs.terminal.bundle import Bundle, TaskConfig
from tempering.synth.scoring import Action

BASE_IMAGE = "python:3.12-slim"


@dataclass(frozen=True)
class Params:
    """Where a bundle sits in its family's space."""

    depth: int
    """Processing stages, 1..family.max_depth."""
    features: tuple[str, ...] = ()
    """Extra requirements (subset of family.features, in the order they were added)."""
    op: str = ""
    """The result the core stage asks for (one of family.ops)."""
    domain: str = ""
    """Scenario names (one of family.domains)."""
    data_seed: int = 0
    """Seed of the fixture data."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "depth": self.depth,
            "features": list(self.features),
            "op": self.op,
            "domain": self.domain,
            "data_seed": self.data_seed,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Params:
        return cls(int(d["depth"]), tuple(d.get("features", ())), d["op"], d["domain"], int(d.get("data_seed", 0)))


@dataclass
class Spec:
    """What a family builds for one Params: the task in words, its data, its oracle and its answers."""

    instruction: str
    """Task text; names every file, rule, threshold and output format the tests check."""
    fixtures: dict[str, bytes]
    """Input files, by path relative to the agent's working directory."""
    solution_py: str
    """Oracle: a Python program run in the working directory that writes the outputs."""
    checks: list[tuple[str, str, Any]] = field(default_factory=list)
    """(kind, output path, expected) triples; kinds: number, text, csv, json, tree, absent."""


class Family(abc.ABC):
    """A parametric bundle family."""

    name: str = ""
    core_skills: tuple[str, ...] = ()
    depth_skills: dict[int, str] = {}
    """Skill added from a given depth on."""
    features: dict[str, str] = {}
    """Feature name -> the skill it exercises (in the order in_breadth adds them)."""
    ops: tuple[str, ...] = ()
    domains: tuple[str, ...] = ()
    max_depth: int = 4

    @abc.abstractmethod
    def build(self, p: Params, rng: random.Random) -> Spec:
        """Fixtures, instruction, oracle and expected outputs for `p`."""

    def skills(self, p: Params) -> frozenset[str]:
        s = set(self.core_skills) | {self.features[f] for f in p.features}
        s |= {skill for d, skill in self.depth_skills.items() if p.depth >= d}
        return frozenset(s)

    def difficulty(self, p: Params) -> str:
        level = p.depth + len(p.features)
        return "easy" if level <= 2 else "medium" if level <= 4 else "hard"

    def task_name(self, p: Params) -> str:
        tag = hashlib.sha256(json.dumps(p.to_dict(), sort_keys=True).encode()).hexdigest()[:6]
        return f"{self.name}-{p.domain}-{p.op}-d{p.depth}" + "".join(f"-{f}" for f in p.features) + f"-{tag}"

    def render(self, p: Params, lineage: dict[str, Any] | None = None) -> Bundle:
        spec = self.build(p, random.Random(p.data_seed))
        files = {f"environment/{path}": data for path, data in spec.fixtures.items()}
        copies = "".join(f"COPY {path} /app/{path}\n" for path in sorted(spec.fixtures))
        files["environment/Dockerfile"] = f"FROM {BASE_IMAGE}\nWORKDIR /app\n{copies}".encode()
        files["solution/solve.sh"] = SOLVE_SH.format(code=spec.solution_py.strip()).encode()
        files["tests/test.sh"] = TEST_SH.encode()
        files["tests/test_outputs.py"] = tests_py(spec.checks).encode()
        meta = {
            "difficulty": self.difficulty(p),
            "category": "data-processing",
            "tags": [self.name, p.domain],
            "skills": sorted(self.skills(p)),
            "family": self.name,
            "params": p.to_dict(),
            **(lineage or {}),
        }
        config = TaskConfig.model_validate(
            {
                "metadata": meta,
                "verifier": {"timeout_sec": 60.0},
                "agent": {"timeout_sec": 300.0 + 150.0 * p.depth},
                "environment": {"cpus": 1, "memory_mb": 512 + 256 * p.depth},
            }
        )
        return Bundle(self.task_name(p), spec.instruction.strip() + "\n", config, files)

    # -- the six actions as parameter moves ----------------------------------------------------------
    def mutate(self, p: Params, action: Action, salt: int = 0) -> Params | None:
        """The parameters `action` leads to, or None when the action is not possible from `p`."""
        new_seed = int.from_bytes(hashlib.sha256(f"{p.data_seed}/{action.name}/{salt}".encode()).digest()[:4], "big")
        proj, direction = action.projection, action.direction
        if direction == "in_depth" and proj == "increase":
            return replace(p, depth=p.depth + 1, data_seed=new_seed) if p.depth < self.max_depth else None
        if direction == "in_depth" and proj == "reduce":
            return replace(p, depth=p.depth - 1, data_seed=new_seed) if p.depth > 1 else None
        if direction == "in_breadth" and proj == "increase":
            free = [f for f in self.features if f not in p.features]
            return replace(p, features=p.features + (free[0],), data_seed=new_seed) if free else None
        if direction == "in_breadth" and proj == "reduce":
            return replace(p, features=p.features[:-1], data_seed=new_seed) if p.features else None
        if direction == "in_depth":  # diversify: another result of the same pipeline
            return replace(p, op=_next(self.ops, p.op), data_seed=new_seed)
        return replace(p, domain=_next(self.domains, p.domain), data_seed=new_seed)


def _next(options: tuple[str, ...], current: str) -> str:
    return options[(options.index(current) + 1) % len(options)]


SOLVE_SH = """#!/usr/bin/env bash
# Oracle solution: computes every output from the fixtures.
set -euo pipefail
cd "${{APP_DIR:-/app}}"
python3 - <<'PY'
{code}
PY
"""

TEST_SH = """#!/usr/bin/env bash
# Runs the tests; writes 1 to the reward file when they pass and 0 when they fail.
REWARD_FILE="${REWARD_FILE:-/logs/verifier/reward.txt}"
mkdir -p "$(dirname "$REWARD_FILE")"
cd "${APP_DIR:-/app}" || { echo 0 > "$REWARD_FILE"; exit 0; }
if python3 "${TESTS_DIR:-/tests}/test_outputs.py"; then
  echo 1 > "$REWARD_FILE"
else
  echo 0 > "$REWARD_FILE"
fi
"""

_TESTS_HEAD = '''"""Checks the agent's outputs in the working directory; runs under pytest or as a plain script."""
import csv
import hashlib
import json
import os
import sys

APP = os.environ.get("APP_DIR", "/app")


def _read(path):
    full = os.path.join(APP, path)
    assert os.path.isfile(full), f"missing output file {path}"
    with open(full, encoding="utf-8") as f:
        return f.read()


def _close(got, want, tol=0.011):
    return abs(float(got) - float(want)) <= tol


def check_number(path, want):
    text = _read(path).strip()
    assert _close(text, want), f"{path}: expected {want}, found {text!r}"


def check_text(path, want):
    got = _read(path).strip().splitlines()
    assert [g.rstrip() for g in got] == want, f"{path}: expected lines {want}, found {got}"


def check_csv(path, want):
    rows = [r for r in csv.reader(_read(path).splitlines()) if r]
    assert rows and rows[0] == want[0], f"{path}: expected header {want[0]}, found {rows[:1]}"
    assert len(rows) == len(want), f"{path}: expected {len(want) - 1} data rows, found {len(rows) - 1}"
    for got, exp in zip(rows[1:], want[1:]):
        assert len(got) == len(exp), f"{path}: row {got} should be {exp}"
        for g, e in zip(got, exp):
            ok = _close(g, e) if isinstance(e, (int, float)) else g.strip() == e
            assert ok, f"{path}: row {got} should be {exp}"


def check_json(path, want):
    got = json.loads(_read(path))
    assert isinstance(got, dict), f"{path}: expected a JSON object"
    for key, exp in want.items():
        assert key in got, f"{path}: missing key {key!r}"
        ok = _close(got[key], exp) if isinstance(exp, (int, float)) else got[key] == exp
        assert ok, f"{path}: {key} should be {exp!r}, found {got[key]!r}"


def check_tree(path, want):
    root = os.path.join(APP, path)
    found = {}
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if not x.startswith(".")]
        for name in files:
            full = os.path.join(d, name)
            with open(full, "rb") as f:
                found[os.path.relpath(full, root)] = hashlib.sha256(f.read()).hexdigest()[:16]
    assert found == want, f"{path}/: expected files {sorted(want)}, found {sorted(found)}"


def check_absent(path, _):
    full = os.path.join(APP, path)
    left = [os.path.join(d, n) for d, _, files in os.walk(full) for n in files if not n.startswith(".")]
    assert not left and not os.path.isfile(full), f"{path} should hold no file, found {left}"

'''


def tests_py(checks: list[tuple[str, str, Any]]) -> str:
    """test_outputs.py: one test per expected output, expected values inlined as JSON."""
    out = [_TESTS_HEAD]
    for n, (kind, path, want) in enumerate(checks):
        slug = "".join(c if c.isalnum() else "_" for c in path).strip("_")
        out.append(
            f"\ndef test_{n}_{kind}_{slug}():\n    check_{kind}({path!r}, json.loads({json.dumps(json.dumps(want))}))\n"
        )
    out.append(
        '\n\nif __name__ == "__main__":\n'
        "    failed = 0\n"
        "    for name, fn in list(globals().items()):\n"
        '        if name.startswith("test_"):\n'
        "            try:\n"
        "                fn()\n"
        '                print("PASS", name)\n'
        "            except Exception as e:  # report every failing check, then fail\n"
        "                failed += 1\n"
        '                print("FAIL", name, e)\n'
        "    sys.exit(1 if failed else 0)\n"
    )
    return "".join(out)
