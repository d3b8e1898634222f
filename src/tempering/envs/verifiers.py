"""Tasksets and environments of the `verifiers` package (0.4.0, `verifiers.v1`) as a task family
(`pip install 'tempering[ecosystem]'`).

`env` names a module. One with a `load_environment(**args)` function gets `args` and returns a
`vf.Env` or a `vf.Taskset`; any other module is a taskset package as the package loads one
(`vf.load_taskset`: its `__all__` exports a `Taskset` subclass, `args` are its config fields; the
package's own tasksets by name). The working directory is on the import path.

Tasks: the taskset's tasks (`load()`, capped by `max_tasks`, which an infinite taskset needs).
Held-out split: the tasks whose `Task.key` (the package's stable identity) hashes into
`heldout_share`, or, with `heldout_args`, the taskset loaded with those arguments (its tasks are then
left out of training, by key).

Single-agent tasksets (`vf.SingleAgentEnv`): the prompt is the task's `prompt` (text, or messages
through the chat template) with its `system_prompt` as a system message. The score is the task's
`@vf.reward` functions (and rewards plugged through the task config), each called as the package
calls it, with `task` (the task data) and `trace` (a `vf.Trace` of the conversation: the prompt,
then the policy's answers and the feedback between them); a function returning a mapping gives one
reward per key. The score is `sum(weight * value)`, equal to the package's own `Task.score(trace)`
then `trace.reward`; each value is logged as `reward/NAME`. An answer succeeds at
`success_threshold`; with `rollout.max_turns > 1` a failed answer gets its score as feedback and the
next answer is scored on the whole conversation.

Environments with their own `run()` and one agent seat (multi-turn games, the package's own tasksets
that play an exchange): the policy plays the seat. The run goes on in the background; each
`interaction.turn(message)` it makes is an observation the policy answers (the first one the
prompt), and when the run ends the task's rewards are scored on the seat's trace, the environment's
`finalize()` runs, and the trace's `reward` (with what the environment recorded) is the last turn's
score. A run that raises, or that does not give the next turn within `task.reward_timeout`, is an
environment error naming the line.

Not covered, each refused with a line saying so: environments with several agent seats (the others
would need a model of their own) or their own `start()`/`stop()`, rewards or a `setup()` that need a
runtime (a sandbox or container), LLM judges, and tasks with tool servers (`toolsets`).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import math
import os
import random
import sys
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tempering.envs.base import Env, StepResult, TaskFamily
from tempering.envs.dataset import in_share
from tempering.envs.rewards import DEFAULT_REWARD_TIMEOUT
from tempering.envs.synthetic import SPLITS, in_heldout
from tempering.errors import UserError
from tempering.models.chat import Conversation
from tempering.types import Task

MISSING = "task.family=verifiers needs the verifiers package: pip install 'tempering[ecosystem]'"


def _package():
    try:
        import verifiers.v1 as vf
    except ImportError as e:
        raise UserError(MISSING) from e
    return vf


def _import(name: str):
    """The module `name`, with the working directory on the import path (as `python -m` has it)."""
    if not isinstance(name, str) or not name or name.endswith(".py") or "/" in name:
        raise UserError(
            f"verifiers: task.args.env is {name!r}; give a module name (env=my_env for ./my_env.py, or an installed "
            "taskset package)"
        )
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)
    try:
        import importlib

        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name and name.split(".")[0] == e.name.split(".")[0]:
            raise UserError(
                f"verifiers: no module named {e.name!r} in the working directory ({cwd}) or on the import path; "
                "give task.args.env as an importable module with load_environment(), or an installed taskset package"
            ) from e
        raise


def _frame(e: BaseException) -> str:
    """`file:line in function: code` of the innermost frame of `e` outside tempering and asyncio
    (the user's reward function, or the library it called)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frames = [f for f in traceback.extract_tb(e.__traceback__) if not os.path.abspath(f.filename).startswith(here)]
    frames = [f for f in frames if "asyncio" not in f.filename] or frames
    if not frames:
        return "?"
    f = frames[-1]
    return f"{f.filename}:{f.lineno} in {f.name}: {(f.line or '').strip()}"


def _short(text: str, limit: int = 120) -> str:
    r = repr(text)
    return r if len(r) <= limit else r[: limit - 4] + "...'"


def _needs_runtime(fn) -> bool:
    p = inspect.signature(fn).parameters.get("runtime")
    return p is not None and p.default is inspect.Parameter.empty


class VerifiersEnv(Env):
    """One episode of one taskset task: each answer is scored by the task's reward functions on the
    conversation so far."""

    def __init__(self, task: Task, family: VerifiersFamily):
        super().__init__(task)
        self.family = family
        self.vf_task = family.vf_tasks[task.id]
        self.messages = list(family.messages(self.vf_task))

    async def step(self, action: str) -> StepResult:
        self.messages.append({"role": "assistant", "content": action})
        trace = self.family.trace(self.vf_task, self.messages)
        parts, weights = await self.family.score(self.vf_task, trace, action)
        total = sum(weights[k] * v for k, v in parts.items())
        ok = total >= self.family.success_threshold
        feedback = f"score {total:g}" + ("" if ok else f" (needs {self.family.success_threshold:g}); try again")
        self.messages.append({"role": "user", "content": feedback})
        return StepResult(
            score=total,
            success=ok,
            done=ok,
            feedback=feedback,
            status="correct" if ok else "incorrect",
            info={"rewards": dict(parts)},
        )


def _text(message) -> str:
    """A turn's message (text, or messages) as the text the policy reads."""
    if isinstance(message, str):
        return message
    from verifiers.v1.types import content_text

    return "\n\n".join(content_text(m["content"] if isinstance(m, dict) else m.content) for m in message)


class _Interaction:
    """The policy in the environment's seat for one exchange (the package's `Interaction` surface that
    environments call): each `turn` hands the message to the rollout and returns the policy's answer."""

    def __init__(self, episode: VerifiersEpisode, task, trace):
        self.episode, self.task, self.trace = episode, task, trace
        self.started = False

    def _add(self, role: str, content: str, sampled: bool = False) -> None:
        from verifiers.v1.graph import MessageNode
        from verifiers.v1.types import AssistantMessage, SystemMessage, UserMessage

        kinds = {"system": SystemMessage, "user": UserMessage, "assistant": AssistantMessage}
        parent = len(self.trace.nodes) - 1 if self.trace.nodes else None
        self.trace.nodes.append(MessageNode(parent=parent, message=kinds[role](content=content), sampled=sampled))

    async def turn(self, message=None):
        from verifiers.v1.agent import Segment
        from verifiers.v1.types import AssistantMessage

        if self.trace.is_completed:
            return Segment(messages=[], terminated=True)
        prompted = not self.started and self.task.data.prompt is not None
        if (message is None) != prompted:
            raise ValueError(
                "a prompted task opens its exchange with a bare turn(); later turns (and prompt-less tasks) send a message"
            )
        if message is None:
            shown = self.episode.family.messages(self.task)
            for m in shown:
                self._add(m["role"], m["content"])
            text = "\n\n".join(m["content"] for m in shown)
        else:
            text = _text(message)
            self._add("user", text)
        self.started = True
        answer = await self.episode.ask(text)
        self._add("assistant", answer, sampled=True)
        return Segment(messages=[AssistantMessage(content=answer)])


class _Seat:
    """The environment's one agent seat, played by the policy."""

    def __init__(self, episode: VerifiersEpisode, name: str):
        self.episode, self.name, self.trainable = episode, name, True

    @contextlib.asynccontextmanager
    async def interaction(self, task, **_):
        vf = self.episode.family.vf
        from verifiers.v1.trace import AgentInfo, TraceTask

        trace = vf.Trace(
            task=TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
            agent=AgentInfo(config=vf.AgentConfig(), name=self.name),
        )
        self.episode.traces.append((task, trace))
        yield _Interaction(self.episode, task, trace)
        trace.stop("user_closed")
        parts, weights = await self.episode.family.score(task, trace, trace.last_reply)
        for k, v in parts.items():  # the task's own rewards, scored as the rollout's close scores them
            trace.record_reward(k, v, weights[k])

    async def run(self, task, **_):
        """One answer to a prompted task (the package's `Agent.run` for a tool-less seat)."""
        async with self.interaction(task) as it:
            await it.turn()


class VerifiersEpisode(Env):
    """One episode of an environment with its own `run()`: the run goes on in the background, each of its
    turns for the seat is an observation the policy answers, and its end scores the episode."""

    def __init__(self, task: Task, family: VerifiersFamily, env):
        super().__init__(task)
        self.family, self.env = family, env
        self.vf_task = family.vf_tasks[task.id]
        self.events: asyncio.Queue = asyncio.Queue()
        self.answer: asyncio.Future | None = None
        self.traces: list = []
        self.runner: asyncio.Task | None = None
        self.failed: BaseException | None = None

    async def ask(self, text: str) -> str:
        self.answer = asyncio.get_running_loop().create_future()
        await self.events.put(("ask", text))
        return await self.answer

    async def _play(self) -> None:
        vf, env, t = self.family.vf, self.env, self.vf_task
        from verifiers.v1.episode import EnvInfo
        from verifiers.v1.trace import TraceTask

        try:
            agents = vf.Agents(env.config, lambda name, spec: _Seat(self, name))
            await env.setup(agents)
            await env.run(t, agents)
            episode = vf.Episode(
                env=EnvInfo(id=env.config.env_id),
                task=TraceTask(type=type(t).__name__, data=t.data, key=t.key, hash=t.hash),
                traces=[trace for _, trace in self.traces],
            )
            await env.finalize(t, episode)
        except Exception as e:  # handed to the rollout, which counts it as this episode's env_error
            await self.events.put(("error", e))
            return
        await self.events.put(("done", None))

    async def _next(self, what: str):
        try:
            return await asyncio.wait_for(self.events.get(), self.family.reward_timeout)
        except asyncio.TimeoutError:
            raise UserError(
                f"verifiers: {type(self.env).__name__}.run() did not {what} within task.reward_timeout="
                f"{self.family.reward_timeout:g} s (task {self.vf_task.key[:12]})"
            ) from None

    def _raised(self, e: BaseException) -> UserError:
        where = _frame(e)
        return UserError(
            f"verifiers: {type(self.env).__name__}.run() raised {type(e).__name__}: {e} at {where} "
            f"(task {self.vf_task.key[:12]})"
        )

    async def reset(self) -> str:
        self.runner = asyncio.ensure_future(self._play())
        try:
            kind, value = await self._next("give the agent its first turn")
        except UserError as e:  # raised again at the first step, where the rollout counts it
            self.failed = e
            return "(the environment did not start)"
        if kind == "ask":
            return value
        if kind == "error":
            self.failed = self._raised(value)
            self.failed.__cause__ = value
        else:
            self.failed = UserError(f"verifiers: {type(self.env).__name__}.run() ended before the agent's first turn")
        return "(the environment did not start)"

    async def step(self, action: str) -> StepResult:
        if self.failed is not None:
            raise self.failed
        assert self.answer is not None
        self.answer.set_result(action)
        kind, value = await self._next("answer")
        if kind == "ask":  # the environment's next message: the exchange goes on
            return StepResult(score=0.0, success=False, done=False, feedback=value, status="step")
        if kind == "error":
            raise self._raised(value) from value
        (_, trace), *_ = self.traces
        total = trace.reward
        ok = total >= self.family.success_threshold
        parts = {k: r.score for k, r in trace.rewards.items() if r is not None}
        return StepResult(
            score=total,
            success=ok,
            done=True,
            feedback=f"score {total:g}",
            status="correct" if ok else "incorrect",
            info={"rewards": parts},
        )

    async def close(self) -> None:
        if self.runner is not None and not self.runner.done():
            self.runner.cancel()
            await asyncio.gather(self.runner, return_exceptions=True)


class VerifiersFamily(TaskFamily):
    """The tasks of a verifiers taskset, scored by its reward functions.

    env: a module with `load_environment(**args)`, or a taskset package; args: its arguments.
    heldout_share: share of tasks (by `Task.key`) held out (default 0.1); heldout_args: load the
    held-out split as its own taskset instead. max_tasks: the first N tasks only (needed for an
    infinite taskset). success_threshold: the weighted reward an answer needs to succeed.
    reward_timeout: seconds one reward function may take on one answer (`task.reward_timeout`).
    """

    def __init__(
        self,
        env: str,
        args: dict[str, Any] | None = None,
        heldout_args: dict[str, Any] | None = None,
        heldout_share: float | None = None,
        max_tasks: int | None = None,
        success_threshold: float = 1.0,
        reward_timeout: float | None = DEFAULT_REWARD_TIMEOUT,
        family_name: str = "verifiers",
    ):
        self.name = family_name
        self.vf = _package()
        self.env_name = env
        if heldout_args is not None and heldout_share is not None:
            raise UserError(
                "verifiers: task.args.heldout_share has no effect with task.args.heldout_args (the held-out split is "
                "that taskset): remove one"
            )
        share = 0.1 if heldout_share is None else heldout_share
        if heldout_args is None and not 0 < share < 1:
            raise UserError(f"verifiers: heldout_share={share} must be in (0, 1)")
        if max_tasks is not None and max_tasks < 1:
            raise UserError(f"verifiers: max_tasks={max_tasks} must be at least 1")
        self.success_threshold = float(success_threshold)
        self.reward_timeout = reward_timeout
        self.vf_tasks: dict[str, Any] = {}
        self.vf_envs: dict[str, Any] = {}
        """The environment whose own `run()` plays a task's episodes (tasks of single-agent tasksets have none)."""
        train = self._load(args or {}, max_tasks, "args")
        if heldout_args is None:
            held = [p for p in train if in_heldout(p[0].key, share)]
            if not held and len(train) > 1:  # as a dataset does: a positive share holds out at least one
                held = [min(train, key=lambda p: in_share(str(p[0].key)))]
            train = [p for p in train if all(p is not h for h in held)]
        else:
            held = self._load(heldout_args, max_tasks, "heldout_args")
            keys = {p[0].key for p in held}
            train = [p for p in train if p[0].key not in keys]
        if not train or not held:
            raise UserError(
                f"verifiers: {env} gives {len(train)} train and {len(held)} held-out tasks; each split needs at least "
                "one (load more tasks, or change heldout_share / heldout_args)"
            )
        self.split = {"train": [self._task(*p) for p in train], "heldout": [self._task(*p) for p in held]}

    def _load(self, args: dict[str, Any], max_tasks: int | None, key: str) -> list[Any]:
        vf = self.vf
        if not isinstance(args, dict):
            raise UserError(f"verifiers: task.args.{key} is {args!r}; give a mapping of arguments")
        import importlib.util

        own = importlib.util.find_spec("verifiers.v1.tasksets")
        builtin = own is not None and any(
            (Path(p) / self.env_name).is_dir() for p in own.submodule_search_locations or []
        )  # one of the package's own tasksets, which its loader finds first
        load = None if builtin else getattr(_import(self.env_name), "load_environment", None)
        if callable(load):
            try:
                made = load(**args)
            except TypeError as e:
                if e.__traceback__ is not None and e.__traceback__.tb_next is None:  # the call itself
                    raise UserError(
                        f"verifiers: {self.env_name}.load_environment{inspect.signature(load)} does not take "
                        f"task.args.{key}={args}: {e}"
                    ) from e
                raise
            if isinstance(made, vf.Env):
                env = None if isinstance(made, vf.SingleAgentEnv) else self._adopt(made)
                taskset = made.taskset
            elif isinstance(made, vf.Taskset):
                taskset, env = made, None
            else:
                raise UserError(
                    f"verifiers: {self.env_name}.load_environment() returned {type(made).__name__}; it must return a "
                    "vf.Env or a vf.Taskset"
                )
        else:
            taskset, env = self._package_taskset(args)
        self._check_tools(taskset)
        if max_tasks is not None:
            taskset = taskset.take(max_tasks)
        elif not taskset.bounded:
            raise UserError(
                f"verifiers: the taskset of {self.env_name} is infinite; give task.args.max_tasks (how many to load)"
            )
        try:
            tasks = list(taskset)
        except Exception as e:  # the taskset's own load(): one line naming where it failed
            raise UserError(
                f"verifiers: loading the tasks of {self.env_name} raised {type(e).__name__}: {e} (at {_frame(e)})"
            ) from e
        if not tasks:
            raise UserError(f"verifiers: the taskset of {self.env_name} ({key}={args}) has no tasks")
        for t in tasks[:1]:
            self._check_task(t, env is not None)
        return [(t, env) for t in tasks]

    def _package_taskset(self, args: dict[str, Any]):
        vf = self.vf
        from pydantic import ValidationError

        try:
            env_cls = vf.environment_class(self.env_name)
            config_type = vf.taskset_config_type(self.env_name)
        except ImportError as e:
            raise UserError(
                f"verifiers: the taskset {self.env_name} needs a module that is not installed: {e}; install what it "
                "needs"
            ) from e
        except (AttributeError, TypeError, ValueError) as e:
            raise UserError(
                f"verifiers: {self.env_name} has no load_environment() and is not a taskset package ({e})"
            ) from e
        try:
            config = config_type.model_validate({**args, "id": self.env_name})
            if env_cls is not vf.SingleAgentEnv:  # the environment's own episodes, with the policy in its seat
                env = vf.load_environment(vf.resolve_env_config({"taskset": config.model_dump()}))
                return env.taskset, self._adopt(env)
            return vf.load_taskset(config), None
        except (RuntimeError, ImportError) as e:  # what the taskset needs is missing (a CLI, a package)
            raise UserError(f"verifiers: the taskset {self.env_name} cannot be built: {e}") from e
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(x) for x in first.get("loc", ()))
            raise UserError(
                f"verifiers: the taskset {self.env_name} rejects its arguments {args}: {where}: {first.get('msg')} "
                f"(its config: {config_type.__name__}, fields {', '.join(config_type.model_fields)})"
            ) from e

    def _adopt(self, env):
        """An environment with its own `run()`: the policy plays its one agent seat."""
        vf = self.vf
        from verifiers.v1.configs.agent import agent_config_fields

        seats = list(agent_config_fields(env.config))
        name = type(env).__name__
        if len(seats) != 1:
            raise UserError(
                f"verifiers: {self.env_name}'s {name} has {len(seats)} agent seats ({', '.join(seats)}); the policy "
                "plays one, and the others would need a model of their own: task.family=verifiers runs environments "
                "with one seat"
            )
        for hook in ("start", "stop"):
            if getattr(type(env), hook) is not getattr(vf.Env, hook):
                raise UserError(
                    f"verifiers: {self.env_name}'s {name} has its own {hook}() (resources served to its episodes), "
                    "which task.family=verifiers does not run"
                )
        self.feedback_template = "\n{feedback}\n"  # each message of the environment is shown alone
        return env

    def _check_tools(self, taskset) -> None:
        task_cls = type(taskset).task_type()
        if type(taskset).toolsets(taskset.config) or task_cls.toolsets(taskset.config.task):
            raise UserError(
                f"verifiers: the taskset of {self.env_name} serves tools (toolsets); tool-calling tasks are not "
                "supported by task.family=verifiers"
            )

    def _check_task(self, t, own_run: bool) -> None:
        vf = self.vf
        name = type(t).__name__
        if t.config.judges:
            raise UserError(
                f"verifiers: task {name} scores with judges ({', '.join(j.id for j in t.config.judges)}), which call a "
                "model client; task.family=verifiers scores with the task's reward functions only"
            )
        need = [fn.__name__ for fn in t.hooks("reward") if _needs_runtime(fn)]
        if need or type(t).setup is not vf.Task.setup:
            what = f"reward functions {', '.join(need)} need" if need else "its setup() needs"
            raise UserError(
                f"verifiers: task {name}: {what} a runtime (a sandbox or container), which task.family=verifiers "
                "does not provide"
            )
        if not t.hooks("reward") and not own_run:
            raise UserError(f"verifiers: task {name} has no @vf.reward functions to score answers with")

    def messages(self, t) -> list[dict[str, str]]:
        """The conversation the policy answers: the system prompt, then the prompt's messages."""
        from verifiers.v1.types import content_text

        out = []
        if t.data.system_prompt is not None:
            out.append({"role": "system", "content": t.data.system_prompt})
        if isinstance(t.data.prompt, str):
            out.append({"role": "user", "content": t.data.prompt})
        else:
            out += [{"role": m.role, "content": content_text(m.content)} for m in t.data.prompt or []]
        if not out:
            raise UserError(f"verifiers: task {t.data.idx} of {self.env_name} has no prompt; the policy needs one")
        return out

    def trace(self, t, messages: list[dict[str, str]]):
        """The package's `Trace` of a conversation: one node per message, the policy's answers sampled."""
        vf = self.vf
        from verifiers.v1.graph import MessageNode
        from verifiers.v1.trace import AgentInfo, TraceTask
        from verifiers.v1.types import AssistantMessage, SystemMessage, UserMessage

        kinds = {"system": SystemMessage, "user": UserMessage, "assistant": AssistantMessage}
        first_answer = len(self.messages(t))
        nodes = [
            MessageNode(
                parent=i - 1 if i else None,
                message=kinds[m["role"]](content=m["content"]),
                sampled=i >= first_answer and m["role"] == "assistant",
            )
            for i, m in enumerate(messages)
        ]
        return vf.Trace(
            task=TraceTask(type=type(t).__name__, data=t.data, key=t.key, hash=t.hash),
            agent=AgentInfo(config=vf.AgentConfig(), name="tempering"),
            nodes=nodes,
        )

    async def score(self, t, trace, answer: str) -> tuple[dict[str, float], dict[str, float]]:
        """Each reward's value and weight by name, in the order the package records them."""
        from verifiers.v1.utils.decorators import invoke

        fns = t.hooks("reward")
        available = {"task": t.data, "trace": trace}

        async def call(fn):
            try:
                out = invoke(fn, available)
                if inspect.isawaitable(out):
                    out = await (out if self.reward_timeout is None else asyncio.wait_for(out, self.reward_timeout))
                return out
            except asyncio.TimeoutError:
                raise UserError(
                    f"verifiers reward {type(t).__name__}.{fn.__name__} did not return within task.reward_timeout="
                    f"{self.reward_timeout:g} s (task {t.key[:12]}, answer {_short(answer)}); fix the function or "
                    "raise task.reward_timeout"
                ) from None
            except Exception as e:
                raise UserError(
                    f"verifiers reward {type(t).__name__}.{fn.__name__} raised {type(e).__name__}: {e} at {_frame(e)} "
                    f"(task {t.key[:12]}, answer {_short(answer)})"
                ) from e

        results = await asyncio.gather(*(call(fn) for fn in fns))
        parts: dict[str, float | None] = {fn.__name__: None for fn in fns}
        weights: dict[str, float] = {}
        for fn, result in zip(fns, results):
            weight = float(getattr(fn, "_vf_weight", 1.0))
            if isinstance(result, Mapping):
                if parts.get(fn.__name__) is None:
                    parts.pop(fn.__name__, None)
                items = list(result.items())
            else:
                items = [(fn.__name__, result)]
            for key, value in items:
                try:
                    v = float(value)
                except (TypeError, ValueError) as e:
                    raise UserError(
                        f"verifiers reward {type(t).__name__}.{fn.__name__} returned {value!r} for {key!r}; rewards are "
                        "numbers"
                    ) from e
                if not math.isfinite(v):
                    raise UserError(
                        f"verifiers reward {type(t).__name__}.{fn.__name__} returned {v} for {key!r} (answer "
                        f"{_short(answer)}); rewards must be finite"
                    )
                parts[key], weights[key] = v, weight
        return {k: v for k, v in parts.items() if v is not None}, weights

    def _task(self, t, env) -> Task:
        tid = f"{self.name}:{self.env_name}:{t.key[:16]}"
        self.vf_tasks[tid] = t
        if env is not None:  # the first observation is what the environment's run() says first
            self.vf_envs[tid] = env
            prompt: str = t.data.prompt_text or f"{self.env_name} task {t.data.name or t.data.idx}"
        else:
            msgs = self.messages(t)
            plain = len(msgs) == 1 and msgs[0]["role"] == "user"
            prompt = msgs[0]["content"] if plain else Conversation(msgs)
        return Task(id=tid, prompt=prompt, family=self.name, meta={"idx": t.data.idx, "key": t.key})

    def tasks(self, split: str, n: int, seed: int = 0) -> list[Task]:
        if split not in SPLITS:
            raise UserError(f"unknown split {split!r}; use one of {SPLITS}")
        pool = self.split[split]
        return list(pool) if n >= len(pool) else random.Random(seed).sample(pool, n)

    def split_size(self, split: str) -> int | None:
        return len(self.split[split]) if split in self.split else None

    def make_env(self, task: Task) -> Env:
        if task.id in self.vf_envs:
            return VerifiersEpisode(task, self, self.vf_envs[task.id])
        return VerifiersEnv(task, self)
