"""OpenEnv environments (`openenv-core` 0.3.0) as a task family, in process or over a server
(`pip install 'tempering[ecosystem]'`).

`env=module:Class` runs an `openenv.core.Environment` subclass (or a factory returning one) in this
process, one instance per episode, built with `env_args`; `url=http://HOST:PORT` plays an OpenEnv
server through the package's own client (`GenericEnvClient`: one WebSocket session, so one
environment instance, per episode; the action and observation schemas come from its `/schema`).

Episodes: a task is a reset seed. `reset(seed=, episode_id=)` gives the first observation; each
policy answer becomes an action and `step(action)` the next observation, shown as feedback, until
the environment says `done` (or `rollout.max_turns`). The G episodes of a task share its seed (the
same start, so their rewards compare) and each has its own `episode_id` (`TASK_ID/N`). Splits:
train seeds and held-out seeds come from disjoint ranges (`(2 * seed + split) * SEED_STRIDE + i`),
so training never resets to a held-out seed; that keeps held-out episodes unseen as far as the
environment makes its episodes from the seed.

Answers to actions: with one action field (the schema's only required field, or `action_field`)
the answer's text fills it; otherwise the answer is a JSON object of the action's fields (a
```json fence allowed). An answer that is no valid action is the policy's error (`parse_error`,
with feedback naming the fields), not the environment's. Observations to text: the observation's
own fields (without OpenEnv's `done`, `reward`, `metadata`): `observation_field`, else the only
text field, else their JSON.

Score: each step's `reward` as the environment reports it (what its `Rubric` computes; None is 0),
the turn's score; a step that ends the episode succeeds when its reward reaches
`success_threshold`. In process, an environment's named rubrics are logged too (`reward/NAME`, their
`last_score`).

Failures: every reset and step must answer within `timeout` seconds. An environment that raises,
hangs past the timeout, or whose server dies ends the episode as an `env_error` naming the cause
(a reset failure shows at the episode's first step), and the run stops once these pass
`task.max_error_rate`. A hung in-process call is left behind in its own daemon thread.
"""

from __future__ import annotations

import asyncio
import importlib
import itertools
import json
import os
import queue
import re
import sys
import threading
from typing import TYPE_CHECKING, Any, ClassVar, get_args, get_origin

from tempering.envs.base import Env, StepResult, TaskFamily
from tempering.envs.synthetic import SPLITS
from tempering.errors import UserError
from tempering.http import ServerError, request_json
from tempering.types import Task

if TYPE_CHECKING:
    from pydantic import BaseModel

MISSING = (
    "task.family=openenv needs the openenv-core package: pip install 'tempering[ecosystem]' && "
    "pip install --no-deps openenv-core==0.3.0 (make install-test does both)"
)

SEED_STRIDE = 2**20
"""Seeds one split of one data seed may use before reaching the next split's."""

BASE_FIELDS = ("done", "reward", "metadata")
"""Fields every OpenEnv observation (and, for `metadata`, action) has; not the environment's own."""


class OpenEnvError(RuntimeError):
    """The environment (or its server) failed, hung or died; the episode is an `env_error`."""


class BadAction(ValueError):
    """The policy's answer is not a valid action."""


def _package():
    try:
        import openenv.core as core
    except ImportError as e:
        raise UserError(MISSING) from e
    return core


def _resolve(spec: str):
    if not isinstance(spec, str) or ":" not in spec:
        raise UserError(f"openenv: task.args.env is {spec!r}; give 'module:Class' (an openenv Environment subclass)")
    mod, _, name = spec.partition(":")
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)
    try:
        module = importlib.import_module(mod)
    except ModuleNotFoundError as e:
        if e.name and mod.split(".")[0] == e.name.split(".")[0]:
            raise UserError(
                f"openenv: no module named {e.name!r} in the working directory ({cwd}) or on the import path "
                f"(task.args.env={spec})"
            ) from e
        raise
    obj = getattr(module, name, None)
    if obj is None:
        have = sorted(k for k, v in vars(module).items() if isinstance(v, type) and not k.startswith("_"))
        raise UserError(f"openenv: {mod} has no {name!r}; its classes: {', '.join(have) or 'none'}")
    return obj


def _types(cls: type) -> tuple[type[BaseModel], type[BaseModel]]:
    """The action and observation classes (pydantic models) of `Environment[Action, Observation, State]`."""
    core = _package()
    for klass in cls.__mro__:
        for base in getattr(klass, "__orig_bases__", ()):
            if get_origin(base) is core.Environment:
                args = get_args(base)
                if len(args) >= 2 and all(isinstance(a, type) for a in args[:2]):
                    return args[0], args[1]
    raise UserError(
        f"openenv: {cls.__name__} does not say its action and observation types; declare it as "
        f"class {cls.__name__}(Environment[MyAction, MyObservation, State])"
    )


class Codec:
    """Answers to actions and observations to text, from the two JSON schemas."""

    def __init__(
        self, action_schema: dict, observation_schema: dict, action_field: str | None, observation_field: str | None
    ):
        props = {k: v for k, v in action_schema.get("properties", {}).items() if k not in BASE_FIELDS}
        required = [k for k in action_schema.get("required", []) if k not in BASE_FIELDS]
        if action_field is not None and action_field not in props:
            raise UserError(
                f"openenv: the action has no field {action_field!r} (task.args.action_field); its fields: {', '.join(props)}"
            )
        self.fields = list(props)
        self.required = required
        self.field = action_field or (
            required[0] if len(required) == 1 else (self.fields[0] if len(self.fields) == 1 else None)
        )
        obs = {k: v for k, v in observation_schema.get("properties", {}).items() if k not in BASE_FIELDS}
        if observation_field is not None and observation_field not in obs:
            raise UserError(
                f"openenv: the observation has no field {observation_field!r} (task.args.observation_field); its "
                f"fields: {', '.join(obs)}"
            )
        texts = [k for k, v in obs.items() if v.get("type") == "string"]
        self.shown = observation_field or (texts[0] if len(texts) == 1 else None)

    def action(self, text: str) -> dict[str, Any]:
        if self.field is not None:
            return {self.field: text.strip()}
        body = text.strip()
        fenced = re.search(r"```(?:json)?\s*(.*?)```", body, flags=re.S)
        if fenced:
            body = fenced.group(1).strip()
        try:
            action = json.loads(body)
        except json.JSONDecodeError as e:
            raise BadAction(
                f"give the action as a JSON object with fields {', '.join(self.fields)} ({e.msg})"
            ) from None
        if not isinstance(action, dict):
            raise BadAction(f"give the action as a JSON object with fields {', '.join(self.fields)}")
        missing = [k for k in self.required if k not in action]
        unknown = [k for k in action if k not in self.fields]
        if missing or unknown:
            raise BadAction(
                f"the action needs fields {', '.join(self.required)}"
                + (f" (missing {', '.join(missing)})" if missing else "")
                + (f" and has no {', '.join(unknown)}" if unknown else "")
            )
        return action

    def text(self, observation: dict[str, Any]) -> str:
        own = {k: v for k, v in observation.items() if k not in BASE_FIELDS}
        if self.shown is not None:
            return str(own.get(self.shown, ""))
        return json.dumps(own, ensure_ascii=False, sort_keys=True, default=str)


class _Worker:
    """One daemon thread per in-process episode: the environment's calls run there one at a time
    (environments are not thread-safe), and a call that hangs is abandoned with its thread."""

    def __init__(self, name: str):
        self.jobs: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            job = self.jobs.get()
            if job is None:
                return
            fn, loop, fut = job
            try:
                ok, value = True, fn()
            except BaseException as e:  # handed to the awaiting side, which reports it
                ok, value = False, e
            try:
                loop.call_soon_threadsafe(_settle, fut, ok, value)
            except RuntimeError:  # the loop is gone: the call had timed out already
                pass

    async def call(self, fn, timeout: float):
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self.jobs.put((fn, loop, fut))
        return await asyncio.wait_for(fut, timeout)

    def stop(self) -> None:
        self.jobs.put(None)


def _settle(fut: asyncio.Future, ok: bool, value: Any) -> None:
    if not fut.done():
        (fut.set_result if ok else fut.set_exception)(value)


class _Local:
    """An in-process environment instance."""

    def __init__(self, family: OpenEnvFamily, episode_id: str):
        self.family, self.worker = family, _Worker(f"openenv {episode_id}")
        self.env: Any = None  # the openenv Environment, made by reset()
        self.hung = False

    async def _call(self, fn, what: str):
        try:
            return await self.worker.call(fn, self.family.timeout)
        except asyncio.TimeoutError:
            self.hung = True
            raise OpenEnvError(
                f"openenv: {what} did not return within task.args.timeout={self.family.timeout:g} s"
            ) from None

    async def reset(self, seed: int, episode_id: str) -> tuple[dict, float | None, bool]:
        def run():
            self.env = self.family.factory(**self.family.env_args)
            return self.env.reset(seed=seed, episode_id=episode_id)

        return self._unpack(await self._call(run, f"{self.family.source}.reset(seed={seed})"))

    async def step(self, action: dict) -> tuple[dict, float | None, bool]:
        from pydantic import ValidationError

        try:
            act = self.family.action_cls.model_validate(action)
        except ValidationError as e:
            raise BadAction(
                f"not a valid action: {e.errors()[0].get('msg')} ({', '.join(map(str, e.errors()[0].get('loc', ())))})"
            ) from None
        return self._unpack(await self._call(lambda: self.env.step(act), f"{self.family.source}.step"))

    def _unpack(self, obs) -> tuple[dict, float | None, bool]:
        core = _package()
        if not isinstance(obs, core.Observation):
            raise OpenEnvError(f"openenv: {self.family.source} returned {type(obs).__name__}, not an Observation")
        return obs.model_dump(exclude=set(BASE_FIELDS)), obs.reward, bool(obs.done)

    def rubric_scores(self) -> dict[str, float]:
        rubric = getattr(self.env, "rubric", None)
        if rubric is None:
            return {}
        named = [("rubric", rubric), *rubric.named_rubrics()]
        return {n: float(r.last_score) for n, r in named if isinstance(r.last_score, (int, float))}

    async def close(self) -> None:
        if self.env is not None and not self.hung:
            env = self.env
            try:
                await self.worker.call(env.close, self.family.timeout)
            except asyncio.TimeoutError:
                self.hung = True
        self.worker.stop()


class _Remote:
    """One WebSocket session of an OpenEnv server, through the package's client."""

    def __init__(self, family: OpenEnvFamily, episode_id: str):
        core = _package()
        t = family.timeout
        self.family = family
        self.client = core.GenericEnvClient(base_url=family.url, connect_timeout_s=t, message_timeout_s=t)

    async def _call(self, coro, what: str):
        try:
            return await asyncio.wait_for(coro, self.family.timeout)
        except asyncio.TimeoutError:
            raise OpenEnvError(
                f"openenv: the server at {self.family.url} did not answer {what} within task.args.timeout="
                f"{self.family.timeout:g} s"
            ) from None

    async def reset(self, seed: int, episode_id: str) -> tuple[dict, float | None, bool]:
        await self._call(self.client.connect(), "the connection")
        r = await self._call(self.client.reset(seed=seed, episode_id=episode_id), f"reset(seed={seed})")
        return r.observation, r.reward, bool(r.done)

    async def step(self, action: dict) -> tuple[dict, float | None, bool]:
        try:
            r = await self._call(self.client.step(action), "step")
        except RuntimeError as e:
            if "VALIDATION_ERROR" in str(e):  # the server's action class refused it: the policy's error
                raise BadAction(f"not a valid action ({e})") from None
            raise
        return r.observation, r.reward, bool(r.done)

    def rubric_scores(self) -> dict[str, float]:
        return {}

    async def close(self) -> None:
        try:
            await asyncio.wait_for(self.client.close(), self.family.timeout)
        except (asyncio.TimeoutError, OSError):  # the server is gone: its session went with it
            pass


class OpenEnvEpisode(Env):
    """One episode: reset with the task's seed, then a step per answer."""

    def __init__(self, task: Task, family: OpenEnvFamily, episode_id: str):
        super().__init__(task)
        self.family, self.episode_id = family, episode_id
        self.session = (_Local if family.url is None else _Remote)(family, episode_id)
        self.failed: BaseException | None = None
        self.total = 0.0

    async def reset(self) -> str:
        seed = self.task.meta["seed"]
        try:
            obs, _, _ = await self.session.reset(seed, self.episode_id)
        except Exception as e:  # raised again at the first step, where the rollout counts it
            self.failed = e
            return f"(the environment failed to reset: {type(e).__name__})"
        return self.family.codec.text(obs)

    async def step(self, action: str) -> StepResult:
        if self.failed is not None:
            raise OpenEnvError(
                f"openenv: reset(seed={self.task.meta['seed']}, episode_id={self.episode_id!r}) failed: "
                f"{type(self.failed).__name__}: {self.failed}"
            ) from self.failed
        try:
            act = self.family.codec.action(action)
            obs, reward, done = await self.session.step(act)
        except BadAction as e:
            return StepResult(score=0.0, success=False, done=False, feedback=str(e), status="parse_error")
        except OpenEnvError:
            raise
        except Exception as e:
            raise OpenEnvError(f"openenv: step of episode {self.episode_id!r} failed: {type(e).__name__}: {e}") from e
        score = 0.0 if reward is None else float(reward)
        ok = done and score >= self.family.success_threshold
        info: dict[str, Any] = {}
        parts = self.session.rubric_scores()
        if parts:
            info["rewards"] = parts
        return StepResult(
            score=score,
            success=ok,
            done=done,
            feedback=self.family.codec.text(obs),
            status="correct" if ok else ("incorrect" if done else "step"),  # a step's feedback is the observation
            info=info,
        )

    async def close(self) -> None:
        await self.session.close()


class OpenEnvFamily(TaskFamily):
    """Episodes of an OpenEnv environment, one task per reset seed.

    env: 'module:Class' (in process) or url: a server's base URL, one of the two. env_args: the
    class's keyword arguments. action_field / observation_field: the field an answer fills / the
    field shown (defaults in the module doc). timeout: seconds a reset or step may take.
    success_threshold: the reward of a final step that counts as success.
    """

    feedback_template: ClassVar[str | None] = "\n{feedback}\n"
    """Each step's feedback is the new observation: the first one is not repeated after it."""

    def __init__(
        self,
        env: str | None = None,
        url: str | None = None,
        env_args: dict[str, Any] | None = None,
        action_field: str | None = None,
        observation_field: str | None = None,
        timeout: float = 30.0,
        success_threshold: float = 1.0,
        family_name: str = "openenv",
    ):
        core = _package()
        self.name = family_name
        if (env is None) == (url is None):
            raise UserError(
                "openenv: give task.args.env (module:Class, run in process) or task.args.url (a server), one of them"
            )
        if url is not None and env_args:
            raise UserError(
                "openenv: task.args.env_args has no effect with task.args.url (the server builds its environments): remove it"
            )
        if not isinstance(timeout, (int, float)) or timeout <= 0:
            raise UserError(f"openenv: task.args.timeout={timeout!r} must be a positive number of seconds")
        self.timeout, self.success_threshold = float(timeout), float(success_threshold)
        self.url = url
        self.env_args = dict(env_args or {})
        self._episodes = itertools.count()
        if env is not None:
            self.source = env
            obj = _resolve(env)
            self.factory = obj
            cls = obj if isinstance(obj, type) else None
            if cls is not None and not issubclass(cls, core.Environment):
                raise UserError(f"openenv: {env} is not an openenv.core.Environment subclass")
            if cls is None:  # a factory: its product says the types
                made = obj(**self.env_args)
                if not isinstance(made, core.Environment):
                    raise UserError(f"openenv: {env}() returned {type(made).__name__}, not an openenv Environment")
                cls = type(made)
                made.close()
            self.action_cls, obs_cls = _types(cls)
            schemas = (self.action_cls.model_json_schema(), obs_cls.model_json_schema())
        else:
            assert url is not None  # exactly one of env and url, checked above
            self.source = url
            schemas = self._server_schemas(url)
        self.codec = Codec(*schemas, action_field, observation_field)

    def _server_schemas(self, url: str) -> tuple[dict, dict]:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise UserError(f"openenv: task.args.url is {url!r}; give the server's base URL, http://HOST:PORT")
        try:
            body = request_json("GET", f"{url.rstrip('/')}/schema", timeout_s=self.timeout)
        except ServerError as e:
            raise UserError(
                f"openenv: cannot read {url}/schema ({e.kind}: {e.reason}); is an OpenEnv server running there?"
            ) from e
        return body["action"], body["observation"]

    def package_seed(self, split: str, seed: int) -> int:
        return (2 * seed + SPLITS.index(split)) * SEED_STRIDE

    def tasks(self, split: str, n: int, seed: int = 0) -> list[Task]:
        if split not in SPLITS:
            raise UserError(f"unknown split {split!r}; use one of {SPLITS}")
        if n > SEED_STRIDE:
            raise UserError(f"openenv: {n} tasks is more than the {SEED_STRIDE} seeds of a split")
        base = self.package_seed(split, seed)
        return [
            Task(
                id=f"{self.name}:{base + i}",
                prompt=f"openenv episode, seed {base + i}",
                family=self.name,
                meta={"seed": base + i},
            )
            for i in range(n)
        ]

    def make_env(self, task: Task) -> Env:
        return OpenEnvEpisode(task, self, f"{task.id}/{next(self._episodes)}")
