"""The data pipeline: roll agents out in the offline apps and keep every step with its multi-solution
annotation, as JSONL (one trajectory per line; the schema is in docs/gui.md).

For single-step training (guided OPD, dual-level GRPO), `states` turns trajectories into one sample
per recorded state, and `score_output` scores a policy output at such a state (`states.py` serves
them as a task family). `play` runs a batched model policy through many episodes at once.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tempering.envs.base import StepResult
from tempering.envs.gui.action import Action, format_output, parse_output
from tempering.envs.gui.agents import Agent, describe
from tempering.envs.gui.env import GuiEnv, GuiFamily, StepView
from tempering.envs.gui.reward import PlanJudge, RewardBreakdown, RewardWeights, dual_reward, plan_match
from tempering.envs.gui.screen import Screen
from tempering.errors import UserError

SCHEMA = "tempering.gui.trajectory/1"
STEP_KEYS = ("prompt", "screen", "valid_actions", "plan", "output", "action", "format_ok", "valid", "status", "reward")
RECORD_KEYS = ("schema", "task_id", "kind", "instruction", "spec", "agent", "success", "steps")


def _step_record(view: StepView, output: str, res: StepResult) -> dict[str, Any]:
    return {
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
    }


def _trajectory(env: GuiEnv, agent: str, steps: list[dict[str, Any]]) -> dict[str, Any]:
    task = env.task
    return {
        "schema": SCHEMA,
        "task_id": task.id,
        "kind": task.meta["kind"],
        "difficulty": int(task.difficulty),
        "split": task.meta.get("split", ""),
        "instruction": env.app.instruction,
        "spec": task.meta["spec"],
        "agent": agent,
        "success": env.app.remaining(env.state) == 0,
        "failed": env.app.remaining(env.state) is None,
        "optimal_steps": env.optimal_steps,
        "steps": steps,
    }


def rollout(env: GuiEnv, agent: Agent) -> dict[str, Any]:
    """Play one episode; the trajectory record with every state's annotation."""
    env.reset()
    steps = []
    while not env.finished:
        view = env.view()
        output = agent.act(view)
        steps.append(_step_record(view, output, env.step_sync(output)))
    return _trajectory(env, agent.name, steps)


def play(envs: list[GuiEnv], act: Callable[[list[str]], list[str]], agent: str = "model") -> list[dict[str, Any]]:
    """Play many episodes in lockstep, one trajectory record each: every round, `act` answers the
    prompts of all unfinished episodes at once (one batched generation for a model policy)."""
    for env in envs:
        env.reset()
    steps: list[list[dict[str, Any]]] = [[] for _ in envs]
    while live := [i for i, env in enumerate(envs) if not env.finished]:
        views = [envs[i].view() for i in live]
        outputs = act([v.prompt for v in views])
        if len(outputs) != len(views):
            raise ValueError(f"the policy answered {len(outputs)} of {len(views)} prompts")
        for i, view, output in zip(live, views, outputs):
            steps[i].append(_step_record(view, output, envs[i].step_sync(output)))
    return [_trajectory(env, agent, s) for env, s in zip(envs, steps)]


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
                    raise UserError(
                        f"{where}: step {k} has no valid actions, so it cannot be scored or "
                        "guided; drop this trajectory or regenerate the file"
                    )
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
    demonstrated: Action
    """The action the recorded agent took, when it was valid (else the first valid action): the one
    ground truth a single-annotation dataset would hold."""
    target: str
    """A well-formed output taking `demonstrated` (the recorded output when valid): a supervised target."""


def states(records: list[dict[str, Any]], multi_only: bool = False) -> list[StateSample]:
    """Every recorded state (only those with several valid actions when `multi_only`)."""
    out = []
    for r in records:
        for s in r["steps"]:
            if multi_only and len(s["valid_actions"]) < 2:
                continue
            valid = [Action.from_json(a) for a in s["valid_actions"]]
            if s["valid"] and s["format_ok"] and s["action"] is not None:
                demonstrated, target = Action.from_json(s["action"]), s["output"]
            else:
                demonstrated = valid[0]
                target = format_output(
                    demonstrated, list(s["plan"]), describe(demonstrated, Screen.from_json(s["screen"]))
                )
            out.append(
                StateSample(
                    prompt=s["prompt"],
                    valid=valid,
                    plan=list(s["plan"]),
                    boxes={e["id"]: tuple(e["bbox"]) for e in s["screen"]["elements"]},
                    instruction=r["instruction"],
                    task_id=r["task_id"],
                    demonstrated=demonstrated,
                    target=target,
                )
            )
    return out


def score_output(
    text: str,
    sample: StateSample,
    weights: RewardWeights | None = None,
    judge: PlanJudge = plan_match,
) -> RewardBreakdown:
    """Dual-level reward of one output at a recorded state."""
    return dual_reward(parse_output(text), sample.valid, sample.plan, weights, judge, sample.boxes, sample.instruction)
