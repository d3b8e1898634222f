"""Tool-calling environments in TRL's `environment_factory` convention: a plain Python class whose
public methods are the tools.

    class Counter:
        def __init__(self):               # called with no arguments, once per episode
            self.total = 0
        def reset(self, **row):            # optional: the task's dataset columns; may return text,
            self.total = 0                 # which is appended to the prompt's last user message
        def add(self, n: int) -> int:      # a tool: type hints and a docstring with an Args section
            \"\"\"Add to the counter.

            Args:
                n: how much to add
            \"\"\"
            self.total += n
            return self.total

    def reward(completions, environments, **columns):  # TRL's reward signature; reads the state
        return [float(env.total == int(t)) for env, t in zip(environments, columns["target"])]

The tools' JSON schemas come from their signatures and docstrings (transformers' `get_json_schema`)
and reach the chat template as `tools=`. Each answer is parsed for Hermes / Qwen tool calls
(`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`); each call runs, and its result goes back
as a `tool` message, rendered by the chat template after the answer's own tokens. A call that cannot
run (unreadable JSON, an unknown tool, arguments that do not fit the schema) is the policy's error:
the model gets the reason as that call's `tool` message, and the call is counted as malformed. A tool
that raises is the environment's error (`env_error`, with the line that raised): tools return the
errors the model should see as text. Tools that run model-written code do it through `run_python`,
in tempering's sandbox.

Every answer is scored by the reward functions on the environment's state after it; the episode ends
when the score reaches `success_threshold`, or with an answer that calls no tool (the final answer),
or at `rollout.max_turns` (each answer is a turn: tool calls need `rollout.max_turns` of 2 or more).
"""

from __future__ import annotations

import inspect
import json
import os
from dataclasses import dataclass, field
from typing import Any

from tempering.envs.base import Env, StepResult, TaskFamily
from tempering.envs.dataset import NOT_PASSED, DatasetFamily
from tempering.envs.rewards import DEFAULT_REWARD_TIMEOUT, RewardFn, _import_file, _import_module, total
from tempering.errors import UserError
from tempering.models.chat import Conversation
from tempering.sandbox import Job, Limits, Sandbox
from tempering.types import Task

OPEN, CLOSE = "<tool_call>", "</tool_call>"
NOT_TOOLS = ("reset",)
"""Public methods of an environment class that are not tools (TRL's convention)."""


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Malformed:
    """A tool call that cannot run, and why (the text the model gets back)."""

    text: str
    problem: str
    name: str | None = None


def _decode(body: str) -> ToolCall | Malformed:
    try:
        call = json.loads(body)
    except json.JSONDecodeError as e:
        return Malformed(body, f"the tool call is not valid JSON ({e.msg} at character {e.pos})")
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return Malformed(body, 'a tool call is a JSON object {"name": TOOL, "arguments": {...}}')
    args = call.get("arguments", {})
    args = {} if args is None else args
    if not isinstance(args, dict):
        return Malformed(body, f"the arguments of {call['name']!r} must be a JSON object", call["name"])
    extra = sorted(set(call) - {"name", "arguments"})
    if extra:
        return Malformed(body, f"a tool call has only name and arguments, not {', '.join(extra)}", call["name"])
    return ToolCall(call["name"], args)


_JSON = json.JSONDecoder()


def _whole_object(text: str, start: int) -> tuple[Any, int] | None:
    """The JSON object at `start` (after blanks) when `</tool_call>` or the answer's end follows it:
    an argument may hold the closing tag itself inside a string."""
    k = start
    while k < len(text) and text[k].isspace():
        k += 1
    try:
        value, end = _JSON.raw_decode(text, k)
    except json.JSONDecodeError:
        return None
    rest = end
    while rest < len(text) and text[rest].isspace():
        rest += 1
    return (value, rest) if text.startswith(CLOSE, rest) or rest == len(text) else None


def parse_tool_calls(text: str) -> list[ToolCall | Malformed]:
    """The tool calls of an answer in the Hermes / Qwen format, in order: the JSON inside each
    `<tool_call>...</tool_call>` (a whole JSON object first, so a string may hold the closing tag).
    A call never closed is malformed, unless it is a whole JSON object that ends the answer (as
    transformers' `parse_response` reads Qwen's answers). An answer without `<tool_call>` has none
    (it is a final answer)."""
    out: list[ToolCall | Malformed] = []
    pos = 0
    while (i := text.find(OPEN, pos)) >= 0:
        whole = _whole_object(text, i + len(OPEN))
        if whole is not None:
            end = whole[1]
            out.append(_decode(text[i + len(OPEN) : end].strip()))
            pos = end + len(CLOSE)
            continue
        j = text.find(CLOSE, i + len(OPEN))
        if j < 0:
            out.append(Malformed(text[i:], f"a {OPEN} is never closed with {CLOSE}"))
            break
        out.append(_decode(text[i + len(OPEN) : j].strip()))
        pos = j + len(CLOSE)
    return out


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


def _fits(value: Any, schema: dict[str, Any]) -> str | None:
    """Why `value` does not fit a JSON schema's type (None when it fits); checks types, enums and
    array items, as far as `get_json_schema` writes them."""
    if value is None and schema.get("nullable"):
        return None
    if "enum" in schema and value not in schema["enum"]:
        return f"must be one of {schema['enum']}"
    kinds = schema.get("type")
    if kinds is None:
        return None
    kinds = kinds if isinstance(kinds, list) else [kinds]
    for k in kinds:
        types = _JSON_TYPES.get(k, (object,))
        if isinstance(value, types) and not (isinstance(value, bool) and k in ("integer", "number")):
            if k == "array" and "items" in schema:
                for n, item in enumerate(value if isinstance(value, list) else []):
                    if (why := _fits(item, schema["items"])) is not None:
                        return f"item {n} {why}"
            return None
    return f"must be {' or '.join(kinds)}, not {json.dumps(value)[:40]}"


def check_call(call: ToolCall, schemas: dict[str, dict[str, Any]]) -> str | None:
    """Why a parsed call cannot run against the tools' schemas (None when it can)."""
    if call.name not in schemas:
        return f"there is no tool {call.name!r}; the tools are {', '.join(sorted(schemas))}"
    params = schemas[call.name]["function"].get("parameters", {})
    props, required = params.get("properties", {}), params.get("required", [])
    unknown = sorted(set(call.arguments) - set(props))
    if unknown:
        return f"{call.name} has no argument {', '.join(unknown)}; its arguments: {', '.join(props) or 'none'}"
    missing = [p for p in required if p not in call.arguments]
    if missing:
        return f"{call.name} needs the argument {', '.join(missing)}"
    for k, v in call.arguments.items():
        if (why := _fits(v, props[k])) is not None:
            return f"argument {k} of {call.name} {why}"
    return None


def tool_methods(obj: Any) -> dict[str, Any]:
    """The public methods of an environment object that are tools, by name."""
    return {
        n: getattr(obj, n)
        for n in sorted(dir(obj))
        if not n.startswith("_") and n not in NOT_TOOLS and inspect.ismethod(getattr(obj, n, None))
    }


def tool_schemas(obj: Any) -> list[dict[str, Any]]:
    """The JSON schema of each tool of `obj`, from its signature and docstring (transformers'
    `get_json_schema`, the schemas chat templates expect)."""
    from transformers.utils import get_json_schema

    out = []
    for n, m in tool_methods(obj).items():
        try:
            out.append(get_json_schema(m))
        except Exception as e:  # transformers' parsing errors: say which method and how to fix it
            raise UserError(
                f"tool {type(obj).__name__}.{n}: {e}; a tool needs type hints and a docstring with an Args "
                "section (transformers' get_json_schema reads them), or make it private (_" + n + ")"
            ) from e
    if not out:
        raise UserError(
            f"{type(obj).__name__} has no tools: its public methods (besides reset) are the tools the model can call"
        )
    return out


def result_text(value: Any) -> str:
    """A tool's return value as the content of its `tool` message."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


_SANDBOX: dict[str, Sandbox] = {}


async def run_python(code: str, timeout_s: float = 10.0, sandbox: Sandbox | None = None) -> str:
    """Run model-written Python in tempering's sandbox (never in this process): its stdout, and its
    stderr's end when it fails, as a tool's result. `sandbox`: default one isolating sandbox, shared."""
    if sandbox is None:
        sandbox = _SANDBOX.setdefault("auto", Sandbox())
    limits = Limits(wall_s=timeout_s, cpu_s=timeout_s, memory_mb=1024, nproc=16, output_bytes=1 << 16)
    res = await sandbox.run(
        Job(cmd=["python3", "-I", "main.py"], files={"main.py": code}, env={"OMP_NUM_THREADS": "1"}, limits=limits)
    )
    if res.status == "ok":
        return res.stdout
    if res.status == "nonzero_exit":
        return f"{res.stdout}error (exit {res.exit_code}):\n{res.stderr[-1500:]}"
    return f"{res.stdout}error: {res.status} ({res.message})"


def load_class(spec: Any) -> type:
    """An environment class: the class itself, `package.module:Class` or `./file.py:Class`."""
    if isinstance(spec, type):
        return spec
    if not isinstance(spec, str) or ":" not in spec:
        raise UserError(f"tools: task.args.env is {spec!r}; give 'package.module:Class' or './file.py:Class'")
    mod, _, name = spec.rpartition(":")
    if mod.endswith(".py") or "/" in mod or os.sep in mod:
        from pathlib import Path

        module = _import_file(Path(mod), spec)
    else:
        module = _import_module(mod, spec)
    cls = getattr(module, name, None)
    if not isinstance(cls, type):
        have = sorted(k for k, v in vars(module).items() if isinstance(v, type) and not k.startswith("_"))
        raise UserError(f"tools: {mod} has no class {name!r} (task.args.env); its classes: {', '.join(have) or 'none'}")
    return cls


def _reset_args(reset: Any, columns: dict[str, Any]) -> dict[str, Any]:
    params = inspect.signature(reset).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return dict(columns)
    names = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return {k: v for k, v in columns.items() if k in names}


class ToolEnv(Env):
    """One episode: a fresh environment object, its tools run on the policy's calls."""

    def __init__(self, task: Task, family: ToolFamily):
        super().__init__(task)
        self.family = family
        self.obj = family.env_class()
        self.tools = tool_methods(self.obj)

    async def reset(self) -> str:
        prompt = self.task.prompt
        reset = getattr(self.obj, "reset", None)
        if reset is None:
            return prompt
        columns = {k: v for k, v in self.task.meta.items() if k not in NOT_PASSED}
        shown = reset(**_reset_args(reset, columns))
        if inspect.isawaitable(shown):
            shown = await shown
        if shown is None:
            return prompt
        if not isinstance(shown, str):
            raise UserError(
                f"{type(self.obj).__name__}.reset() returned {type(shown).__name__}; it returns None or text "
                "(appended to the prompt's last user message)"
            )
        msgs = [dict(m) for m in prompt.messages]  # type: ignore[attr-defined]
        users = [i for i, m in enumerate(msgs) if m["role"] == "user"]
        if users:
            msgs[users[-1]]["content"] = f"{msgs[users[-1]]['content']}{shown}"
        else:
            msgs.append({"role": "user", "content": shown})
        return Conversation(msgs, self.family.schemas)

    async def _run(self, call: ToolCall) -> str:
        try:
            out = self.tools[call.name](**call.arguments)
            if inspect.isawaitable(out):
                out = await out
        except Exception as e:
            raise UserError(
                f"tool {type(self.obj).__name__}.{call.name} raised {type(e).__name__}: {e} (arguments "
                f"{json.dumps(call.arguments)[:200]}); a tool returns the errors the model should see as text"
            ) from e
        return result_text(out)

    async def step(self, action: str) -> StepResult:
        calls = parse_tool_calls(action)
        limit = self.family.max_calls_per_turn
        messages, ran, bad = [], 0, 0
        for n, c in enumerate(calls):
            if n >= limit:
                problem: str | None = f"at most {limit} tool calls per answer; this one was not run"
            elif isinstance(c, Malformed):
                problem = c.problem
            else:
                problem = check_call(c, self.family.by_name)
            if problem is not None:
                bad += 1
                messages.append({"role": "tool", "name": c.name or "", "content": f"error: {problem}"})
                continue
            assert isinstance(c, ToolCall)
            messages.append({"role": "tool", "name": c.name, "content": await self._run(c)})
            ran += 1
        columns = {k: v for k, v in self.task.meta.items() if k not in NOT_PASSED}
        columns["environments"] = self.obj
        parts = await self.family.data.batcher.score(self.task.prompt, action, columns, self.task.answer)
        score = total(self.family.data.rewards, parts)
        ok = score >= self.family.success_threshold
        final = not calls
        if ok:
            status = "correct"
        elif final:
            status = "incorrect"
        else:
            status = "tool_error" if bad else "tool_calls"
        feedback = "\n".join(f"{m['name'] or '?'}: {m['content']}" for m in messages)  # what samples show
        info = {"rewards": parts, "tool_calls": ran, "tool_malformed": bad}
        return StepResult(score, ok, ok or final, feedback, status, info, None if ok or final else messages)


class ToolFamily(TaskFamily):
    """Tasks from a dataset's prompts, served by a tool environment class (TRL's `environment_factory`).

    env: the class (`package.module:Class`, `./file.py:Class`); it is built with no arguments for
    every episode, `reset(**columns)` is called when it has one, and its public methods are the tools.
    train, heldout, prompt_column, heldout_share (default 0.1; not with `heldout`): the prompts, as for
    `task.family=dataset`. reward, reward_weights: TRL-style reward functions, which get
    `environments=` (each episode's object) beside the dataset's columns and the answer as the
    completion. success_threshold: the score that ends an episode as a success. max_calls_per_turn:
    calls run per answer (more are malformed).
    """

    reads_feedback_template = False  # tool results come back as `tool` messages
    offers_tools = True

    def __init__(
        self,
        env: Any,
        train: Any,
        reward: str | RewardFn | list,
        heldout: Any = None,
        prompt_column: str = "prompt",
        heldout_share: float | None = None,
        success_threshold: float = 1.0,
        reward_weights: list[float] | None = None,
        max_calls_per_turn: int = 8,
        name: str = "tools",
        reward_timeout: float | None = DEFAULT_REWARD_TIMEOUT,
    ):
        self.name = name
        self.env_class = load_class(env)
        if not isinstance(max_calls_per_turn, int) or max_calls_per_turn < 1:
            raise UserError(f"tools: max_calls_per_turn={max_calls_per_turn!r} must be a positive integer")
        self.max_calls_per_turn = max_calls_per_turn
        self.success_threshold = success_threshold
        try:
            probe = self.env_class()
        except TypeError as e:
            raise UserError(
                f"tools: {self.env_class.__name__}() failed ({e}); an environment class is built with no "
                "arguments (TRL's environment_factory): give its arguments defaults"
            ) from e
        self.schemas = tool_schemas(probe)
        self.by_name = {s["function"]["name"]: s for s in self.schemas}
        if heldout is not None and heldout_share is not None:
            raise UserError(
                "tools: task.args.heldout_share has no effect with task.args.heldout (the held-out prompts are that "
                "file's): remove one"
            )
        self.data = DatasetFamily(
            train,
            reward=reward,
            heldout=heldout,
            prompt_column=prompt_column,
            heldout_share=0.1 if heldout_share is None else heldout_share,
            success_threshold=success_threshold,
            name=name,
            reward_weights=reward_weights,
            reward_timeout=reward_timeout,
        )

    @property
    def reward_timeout(self) -> float | None:
        return self.data.reward_timeout

    @reward_timeout.setter
    def reward_timeout(self, seconds: float | None) -> None:
        self.data.reward_timeout = seconds

    def _with_tools(self, t: Task) -> Task:
        msgs = (
            list(t.prompt.messages) if isinstance(t.prompt, Conversation) else [{"role": "user", "content": t.prompt}]
        )
        return Task(t.id, Conversation(msgs, self.schemas), t.answer, t.family, t.difficulty, dict(t.meta))

    def tasks(self, split: str, n: int, seed: int = 0) -> list[Task]:
        return [self._with_tools(t) for t in self.data.tasks(split, n, seed)]

    def split_size(self, split: str) -> int | None:
        return self.data.split_size(split)

    def make_env(self, task: Task) -> Env:
        return ToolEnv(task, self)
