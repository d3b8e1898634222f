"""Whether a task pays for no work: its tests pass before any command ran, or on the reference's output
mutated (emptied, a comment line, truncated, digits zeroed). `synth check` runs this as its `unsolved` and
`mutants` stages; `TerminalFamily` runs the cheap part (`pays_for_nothing`) on the tasks it loads for
training, so a task loaded without `synth check` cannot reward an empty answer."""

from __future__ import annotations

import io
import re
import tarfile

from tempering.envs.terminal.bundle import Bundle, Step
from tempering.envs.terminal.session import solve_then_test
from tempering.envs.terminal.workspace import Workspace

MUTATIONS = (
    ("emptied", lambda b: b""),
    ("replaced by a comment line", lambda b: b"# \n"),
    ("truncated to its first half", lambda b: b[: len(b) // 2]),
    ("with every digit zeroed", lambda b: re.sub(rb"[1-9]", b"0", b)),
)
CHEAP_MUTANTS = 2
"""Mutants the training-time screen tries per step: each written file emptied, then a comment line."""


def _files(state: bytes) -> dict[str, bytes]:
    """The regular files of a working-folder state, read in memory (never unpacked on the host)."""
    with tarfile.open(fileobj=io.BytesIO(state)) as t:
        return {m.name: t.extractfile(m).read() for m in t.getmembers() if m.isreg()}  # type: ignore[union-attr]


def _replaced(state: bytes, name: str, data: bytes) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(state)) as src, tarfile.open(fileobj=out, mode="w") as dst:
        for m in src.getmembers():
            if m.name == name:
                m.size = len(data)
                dst.addfile(m, io.BytesIO(data))
            else:
                dst.addfile(m, src.extractfile(m) if m.isreg() else None)
    return out.getvalue()


async def accepted_mutant(ws: Workspace, step: Step, before: bytes, limit: int) -> tuple[str, float]:
    """Runs the tests on the reference's state with one file it wrote or changed mutated (`MUTATIONS`, at
    most `limit` mutants): which mutant they accept ("" when none) and the seconds spent. A task whose
    tests pass an empty or zeroed answer grades no work."""
    old, new = _files(before), _files(ws.state)
    changed = sorted(n for n, b in new.items() if old.get(n) != b)
    wall = 0.0
    tried = 0
    for name in changed:
        for what, mutate in MUTATIONS:
            data = mutate(new[name])
            if data.strip() == new[name].strip():  # the same answer ("7\n" truncated is "7"): no mutant
                continue
            if tried == limit:
                return "", wall
            tried += 1
            mutant = ws.copy()
            mutant.state = _replaced(ws.state, name, data)
            rewards, run = await mutant.run_tests(step)
            wall += run.wall_s
            if rewards.score is not None and rewards.score >= 1:
                return f"{name} in the working folder (written by the reference solution) is {what}", wall
    return "", wall


async def pays_for_nothing(ws: Workspace, bundle: Bundle, mutants: int = CHEAP_MUTANTS) -> str:
    """Why the task's tests give a full reward for no work ("" when they do not): for each step in order,
    the tests before its solution ran, then (where the reference solves the step) the reference's output
    emptied and made a comment line. A step whose reference does not pass ends the screen (`synth check`
    says why)."""
    for step in bundle.steps:
        at = f"step {step.name}: " if step.name else ""
        unsolved, _ = await ws.run_tests(step)
        if unsolved.score is not None and unsolved.score >= 1:
            return f"{at}the tests pass before any command ran"
        if not step.solution.get("solve.sh", b"").strip():
            return ""
        before = ws.state
        run, rewards, _ = await solve_then_test(ws, step)
        if run.exit_code != 0 or rewards is None or rewards.score is None or rewards.score < 1:
            return ""
        accepted, _ = await accepted_mutant(ws, step, before, mutants)
        if accepted:
            return f"{at}the tests pass when {accepted}"
    return ""
