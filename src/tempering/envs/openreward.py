"""OpenReward environments (`task.family=openreward`): an environment served over HTTP by the Open Reward
Standard (ORS) with a reward on every tool output, reached through the `openreward` SDK's own client.

The server lists its tasks by split; an episode is one session on one task: the session's prompt is the
first observation, with the environment's tools (their JSON schemas, from the server's tool list) given to
the chat template as `tools=`; each answer's tool calls (Hermes / Qwen `<tool_call>` JSON, parsed as for
`task.family=tools`) run on the server in order and come back as `tool` messages; a call the schema refuses,
or that the server refuses (an unknown tool, invalid input), is the policy's error (`tool_error`, its
message says why) and the episode goes on. A turn's score is the episode's reward so far (the sum of every
tool output's reward), so the episode's reward is its return; the episode ends when a tool returns
`finished`, with an answer that calls no tool (routed to the environment's terminal tool when it has one),
or at `rollout.max_turns`. A server that drops the connection, or a call that passes `timeout`, is an
environment error naming the server and the call (counted against `task.max_error_rate`; a group holding
one is trained on or dropped by `rollout.on_env_error`).
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

from tempering.envs.base import Env, StepResult, TaskFamily
from tempering.envs.dataset import heldout_count, in_share
from tempering.envs.tools import ToolCall, check_call, parse_tool_calls
from tempering.errors import UserError
from tempering.models.chat import Conversation
from tempering.types import Task


def _sdk():
    try:
        from openreward.api.environments import client, types
        from openreward.api.errors import ToolCallError
    except ImportError as e:
        raise UserError(
            "task.family=openreward needs the openreward SDK (Python 3.11+): "
            "`pip install 'tempering[ecosystem]' && pip install --no-deps openreward==0.1.167`"
        ) from e
    return client, types, ToolCallError


def _transport_errors() -> tuple[type[BaseException], ...]:
    """What a server that is gone, refuses, or does not answer raises through the SDK (a bug of ours is not
    among them, so it is never reported as the server's)."""
    import aiohttp
    from openreward.api.errors import OpenRewardError

    return (OpenRewardError, aiohttp.ClientError, OSError, asyncio.TimeoutError)


def _text(blocks: Any, where: str) -> str:
    """The text of a prompt's or a tool output's blocks; an image is refused (the policies read text)."""
    out = []
    for b in blocks:
        if getattr(b, "type", "text") != "text":
            raise UserError(f"{where} holds a {b.type} block; tempering's policies read text only")
        out.append(b.text)
    return "\n".join(out)


def _run(coro: Any) -> Any:
    """Run a coroutine to completion from synchronous code, on a thread of its own (a caller may already
    be inside an event loop)."""
    box: dict[str, Any] = {}

    def go() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as e:  # handed to the caller
            box["error"] = e

    t = threading.Thread(target=go, name="openreward", daemon=True)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


class OpenRewardEnv(Env):
    """One session on the server for one episode."""

    def __init__(self, task: Task, family: OpenRewardFamily):
        super().__init__(task)
        self.family = family
        self.api: Any = None
        self.session: Any = None
        self.total = 0.0

    def _dropped(self, what: str, e: BaseException) -> UserError:
        cause = (
            "no answer within task.args.timeout" if isinstance(e, asyncio.TimeoutError) else f"{type(e).__name__}: {e}"
        )
        return UserError(f"OpenReward server {self.family.url} dropped the episode at {what} ({cause})")

    async def reset(self) -> str:
        client, types, _ = _sdk()
        f = self.family
        spec = types.Task(
            server_name=f.env_name, environment_name=f.env_name, task_spec=self.task.meta["task_spec"], namespace=None
        )
        self.api = client.AsyncEnvironmentsAPI(base_url=f.url, api_key=None)
        try:
            self.session = f.environment(self.api).session(task=spec)
            await asyncio.wait_for(self.session.__aenter__(), f.timeout)
            blocks = await asyncio.wait_for(self.session.get_prompt(), f.timeout)
        except _transport_errors() as e:
            raise self._dropped(f"the start of task {self.task.id!r}", e) from e
        return Conversation([{"role": "user", "content": _text(blocks, f"the prompt of {self.task.id!r}")}], f.schemas)

    async def _call(self, name: str | None, arguments: dict[str, Any]) -> tuple[str, Any]:
        """(the tool message's text, the output or None when the server refused the call); name None: the
        environment's terminal tool."""
        _, _, ToolCallError = _sdk()
        try:
            if name is None:
                out = await asyncio.wait_for(self.session.call_terminal_tool(arguments["message"]), self.family.timeout)
            else:
                out = await asyncio.wait_for(self.session.call_tool(name, arguments), self.family.timeout)
        except ToolCallError as e:  # not run: an unknown tool, invalid input, the episode already finished
            return f"error: {e}", None
        except _transport_errors() as e:
            call = f"{name}({json.dumps(arguments)[:120]})" if name else "the terminal tool"
            raise self._dropped(f"{call} of task {self.task.id!r}", e) from e
        return _text(out.blocks, f"the output of {name}"), out

    async def step(self, action: str) -> StepResult:
        f = self.family
        calls = parse_tool_calls(action)
        messages: list[dict[str, Any]] = []
        ran = bad = 0
        finished = False
        if not calls and f.terminal:  # a plain answer goes to the environment's terminal tool
            text, out = await self._call(None, {"message": action})
            calls_made = [(out, text)]
            ran, bad = int(out is not None), int(out is None)
        else:
            calls_made = []
            for n, c in enumerate(calls):
                problem = None
                if n >= f.max_calls_per_turn:
                    problem = f"at most {f.max_calls_per_turn} tool calls per answer; this one was not run"
                elif not isinstance(c, ToolCall):
                    problem = c.problem
                else:
                    problem = check_call(c, f.by_name)
                if problem is not None or finished:
                    bad += problem is not None
                    messages.append(
                        {
                            "role": "tool",
                            "name": getattr(c, "name", "") or "",
                            "content": f"error: {problem or 'the episode has finished'}",
                        }
                    )
                    continue
                assert isinstance(c, ToolCall)
                text, out = await self._call(c.name, c.arguments)
                bad += out is None
                ran += out is not None
                messages.append({"role": "tool", "name": c.name, "content": text})
                calls_made.append((out, text))
                finished = finished or bool(out is not None and out.finished)
        for out, _ in calls_made:
            if out is not None:
                self.total += float(out.reward or 0.0)
                finished = finished or bool(out.finished)
        final = finished or not calls
        ok = finished and self.total >= f.success_threshold
        status = "correct" if ok else "incorrect" if final else "tool_error" if bad else "tool_calls"
        feedback = "\n".join(f"{m['name'] or '?'}: {m['content']}" for m in messages)
        info = {"tool_calls": ran, "tool_malformed": bad}
        return StepResult(self.total, ok, final, feedback, status, info, None if final else messages)

    async def close(self) -> None:
        try:
            if self.session is not None:
                await asyncio.wait_for(self.session.__aexit__(None, None, None), self.family.timeout)
        except _transport_errors():  # the server may be gone already: the episode has reported it
            pass
        finally:
            if self.api is not None:
                await self.api.aclose()


class OpenRewardFamily(TaskFamily):
    """Tasks of an OpenReward (ORS) environment server.

    url: the server's base URL (e.g. http://127.0.0.1:8080). env: the environment's name on the server
    (default: its only one). split: the server's split trained on. heldout_split: the server's split held
    out (when the server has no such split, a share of `split`'s tasks, by the hash of their spec, is held
    out instead). heldout_share: that share. success_threshold: the episode's return that counts as
    success (when a tool has finished it). max_calls_per_turn: calls run per answer (more are refused).
    timeout: seconds a session start or a tool call may take before the episode is an environment error.
    """

    reads_feedback_template = False  # tool outputs come back as `tool` messages

    def __init__(
        self,
        url: str,
        env: str | None = None,
        split: str = "train",
        heldout_split: str = "test",
        heldout_share: float = 0.1,
        success_threshold: float = 1.0,
        max_calls_per_turn: int = 8,
        timeout: float = 60.0,
        name: str = "openreward",
    ):
        self.name, self.url = name, url.rstrip("/")
        self.success_threshold, self.timeout = float(success_threshold), float(timeout)
        if not isinstance(max_calls_per_turn, int) or max_calls_per_turn < 1:
            raise UserError(f"openreward: max_calls_per_turn={max_calls_per_turn!r} must be a positive integer")
        self.max_calls_per_turn = max_calls_per_turn
        client, _, _ = _sdk()
        try:
            tools, terminal, train, held = _run(self._discover(client, env, split, heldout_split))
        except _transport_errors() as e:
            raise UserError(
                f"OpenReward server {self.url} cannot be reached ({type(e).__name__}: {e}); start it, or fix task.args.url"
            ) from None
        self.schemas: list[dict[str, Any]] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description or "",
                    "parameters": t.input_schema or {"type": "object", "properties": {}},
                },
            }
            for t in tools
        ]
        self.by_name = {s["function"]["name"]: s for s in self.schemas}
        self.terminal = terminal is not None
        if held is None:
            ordered = sorted(range(len(train)), key=lambda i: in_share(json.dumps(train[i], sort_keys=True)))
            out = set(ordered[: heldout_count(len(train), heldout_share)])
            held = [train[i] for i in sorted(out)]
            train = [t for i, t in enumerate(train) if i not in out]
            held_split = f"{split} (held out)"
        else:
            held_split = heldout_split
        self.split = {
            "train": [self._task(s, "train", split, i) for i, s in enumerate(train)],
            "heldout": [self._task(s, "heldout", held_split, i) for i, s in enumerate(held)],
        }
        if not self.split["train"]:
            raise UserError(f"OpenReward server {self.url}: split {split!r} of {self.env_name!r} has no tasks")

    async def _discover(self, client: Any, env: str | None, split: str, heldout_split: str):
        api = client.AsyncEnvironmentsAPI(base_url=self.url, api_key=None)
        try:
            if env is None:
                names = await self._environments()
                if len(names) != 1:
                    raise UserError(
                        f"OpenReward server {self.url} serves {len(names)} environments ({', '.join(names)}); "
                        "name one with task.args.env"
                    )
                env = names[0]
            self.env_name = env
            e = self.environment(api)
            splits = await asyncio.wait_for(e.list_splits(), self.timeout)
            splits = [getattr(s, "name", s) for s in splits]
            if split not in splits:
                raise UserError(
                    f"OpenReward server {self.url}: {env!r} has no split {split!r} (its splits: {', '.join(splits)}); "
                    "set task.args.split"
                )
            tools = await asyncio.wait_for(e.list_tools(), self.timeout)
            terminal = await asyncio.wait_for(e.terminal_tool(), self.timeout)
            train = [t.task_spec for t in await asyncio.wait_for(e.list_tasks(split), self.timeout)]
            held = None
            if heldout_split in splits and heldout_split != split:
                held = [t.task_spec for t in await asyncio.wait_for(e.list_tasks(heldout_split), self.timeout)]
            return tools, terminal, train, held
        finally:
            await api.aclose()

    def environment(self, api: Any) -> Any:
        """The SDK's handle on the environment; named as its variant too, so every request goes to its own
        routes (a bare route reaches the server's first environment)."""
        return api.get(self.env_name, variant=self.env_name)

    async def _environments(self) -> list[str]:
        """The environments the server serves (its `/list_environments`)."""
        import aiohttp

        timeout = aiohttp.ClientTimeout(total=self.timeout)
        async with aiohttp.ClientSession() as http, http.get(f"{self.url}/list_environments", timeout=timeout) as r:
            r.raise_for_status()
            return [str(x) for x in await r.json()]

    def _task(self, spec: dict[str, Any], split: str, server_split: str, i: int) -> Task:
        label = spec.get("id", i) if isinstance(spec, dict) else i
        # the prompt comes from the episode's session (`reset`); the task's own text names it for logs
        prompt = Conversation(
            [{"role": "user", "content": f"[{self.env_name} {server_split} task {label}]"}], self.schemas
        )
        return Task(
            id=f"{self.name}:{split}:{i}",
            prompt=prompt,
            family=self.name,
            meta={"task_spec": spec, "split": server_split, "index": i},
        )

    def tasks(self, split: str, n: int, seed: int = 0) -> list[Task]:
        import random

        if split not in self.split:
            raise UserError(f"unknown split {split!r}; use train or heldout")
        pool = self.split[split]
        return list(pool) if n >= len(pool) else random.Random(seed).sample(pool, n)

    def split_size(self, split: str) -> int | None:
        return len(self.split[split]) if split in self.split else None

    def make_env(self, task: Task) -> Env:
        return OpenRewardEnv(task, self)
