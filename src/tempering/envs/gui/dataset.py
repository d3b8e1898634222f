"""The data pipeline: roll agents out in the offline apps and keep every step with its multi-solution
annotation, as JSONL (one trajectory per line; the schema is in docs/gui.md).

For single-step training (guided OPD, dual-level GRPO), `states` turns trajectories into one sample
per recorded state, and `score_output` scores a policy output at such a state.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tempering.algos.litegui import PlanJudge, RewardBreakdown, RewardWeights, dual_reward, plan_match
from tempering.envs.gui.action import Action, parse_output
from tempering.envs.gui.agents import Agent
from tempering.envs.gui.env import GuiEnv, GuiFamily
from tempering.errors import UserError
from tempering.types import Task

SCHEMA = "tempering.gui.trajectory/1"
STEP_KEYS = ("prompt", "screen", "valid_actions", "plan", "output", "action", "format_ok", "valid", "status", "reward")
RECORD_KEYS = ("schema", "task_id", "kind", "instruction", "spec", "agent", "success", "steps")


def rollout(env: GuiEnv, agent: Agent) -> dict[str, Any]:
    """Play one episode; the trajectory record with every state's annotation."""
    env.reset()
    steps = []
    while not env.finished:
        view = env.view()
        output = agent.act(view)
        res = env.step_sync(output)
        steps.append({
            "prompt": view.prompt,
            "screen": view.screen.to_json(),
            "valid_actions": [a.to_json() for a in view.valid],
            "plan": view.plan,
            "output": output,
            "action": res.info["action"],
            "format_ok": res.info["format_ok"],
            "valid": res.info["valid"],
            "status": res.status,
            "error": res.info["error"],
            "reward": res.info["reward"],
        })
    task = env.task
    return {
        "schema": SCHEMA,
        "task_id": task.id,
        "kind": task.meta["kind"],
        "difficulty": int(task.difficulty),
        "split": task.meta.get("split", ""),
        "instruction": env.app.instruction,
        "spec": task.meta["spec"],
        "agent": agent.name,
        "success": env.app.remaining(env.state) == 0,
        "failed": env.app.remaining(env.state) is None,
        "optimal_steps": env.optimal_steps,
        "steps": steps,
    }


def generate(family: GuiFamily, agent: Agent, n: int, split: str = "train", seed: int = 0) -> list[dict[str, Any]]:
    """Trajectories of `agent` on `n` tasks of `family`."""
    return [rollout(family.make_env(t), agent) for t in family.tasks(split, n, seed)]


def write_jsonl(path: str | os.PathLike, records: Iterable[dict[str, Any]]) -> None:
    """Write atomically: a temp file in the same folder, then rename (no half-written file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for r in records:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_dataset(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Read and check a trajectory file; a bad line is an error naming the line and the fix."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"no GUI dataset at {path}; make one with `tempering gui generate --out {path}`")
    out = []
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path}:{n}"
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise UserError(f"{where}: not valid JSON ({e}); each line must be one trajectory object") from e
            if not isinstance(rec, dict) or any(k not in rec for k in RECORD_KEYS):
                raise UserError(f"{where}: a trajectory needs the keys {', '.join(RECORD_KEYS)} (see docs/gui.md)")
            if rec["schema"] != SCHEMA:
                raise UserError(f"{where}: schema {rec['schema']!r} is not {SCHEMA!r}; regenerate the file")
            for k, step in enumerate(rec["steps"], start=1):
                missing = [key for key in STEP_KEYS if key not in step]
                if missing:
                    raise UserError(f"{where}: step {k} lacks {', '.join(missing)} (see docs/gui.md)")
                if not step["valid_actions"]:
                    raise UserError(f"{where}: step {k} has no valid actions, so it cannot be scored or "
                                    "guided; drop this trajectory or regenerate the file")
                try:
                    [Action.from_json(a) for a in step["valid_actions"]]
                except (ValueError, TypeError) as e:
                    raise UserError(f"{where}: step {k} has a malformed valid action ({e})") from e
            out.append(rec)
    return out


@dataclass
class StateSample:
    """One recorded state, for single-step training."""

    prompt: str
    """The observation the student sees."""
    valid: list[Action]
    """All valid actions (privileged: reward and teacher guidance only)."""
    plan: list[str]
    """The subtasks still to do (reference for the plan judge)."""
    boxes: dict[str, tuple[float, float, float, float]]
    """Element id -> bounding box, for clicks by point."""
    instruction: str
    task_id: str


def states(records: list[dict[str, Any]], multi_only: bool = False) -> list[StateSample]:
    """Every recorded state (only those with several valid actions when `multi_only`)."""
    out = []
    for r in records:
        for s in r["steps"]:
            if multi_only and len(s["valid_actions"]) < 2:
                continue
            out.append(StateSample(
                prompt=s["prompt"],
                valid=[Action.from_json(a) for a in s["valid_actions"]],
                plan=list(s["plan"]),
                boxes={e["id"]: tuple(e["bbox"]) for e in s["screen"]["elements"]},
                instruction=r["instruction"],
                task_id=r["task_id"],
            ))
    return out


def state_tasks(samples: list[StateSample]) -> list[Task]:
    """The samples as single-turn tasks (prompt = observation; the annotation in `answer`)."""
    return [Task(id=f"{s.task_id}#{i}", prompt=s.prompt, answer=s, family="gui-state") for i, s in enumerate(samples)]


def score_output(
    text: str,
    sample: StateSample,
    weights: RewardWeights | None = None,
    judge: PlanJudge = plan_match,
) -> RewardBreakdown:
    """Dual-level reward of one output at a recorded state."""
    return dual_reward(parse_output(text), sample.valid, sample.plan, weights, judge, sample.boxes, sample.instruction)
