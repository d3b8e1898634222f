"""task.family=openenv against openenv-core itself: environments written in its own form, run in
process and behind its own server (started here on 127.0.0.1), compared with the package's client."""

import asyncio
import importlib.util
import json
import os
import socket
import subprocess
import sys
import time

import pytest

if importlib.util.find_spec("openenv") is None:  # found, not imported: collection stays cheap
    pytest.skip("openenv-core is not installed", allow_module_level=True)

from tempering.envs.registry import make_family
from tempering.errors import UserError
from tempering.rollout.engine import _step

ENV = '''
"""Guess a number in OpenEnv's form: typed action and observation, a Rubric, seeded resets."""
import random
import time

from openenv.core import Action, Environment, Observation, State
from openenv.core.rubrics import Rubric


class GuessAction(Action):
    guess: str


class GuessObservation(Observation):
    message: str


class Closeness(Rubric):
    """1 for the number, less the further the guess is; 0 for no number."""

    def forward(self, action, observation):
        return observation.metadata["closeness"]


class GuessEnv(Environment[GuessAction, GuessObservation, State]):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, top: int = 9, turns: int = 3, hang_at: int = -1, fail_at: int = -1):
        super().__init__(rubric=Closeness())
        self.top, self.turns, self.hang_at, self.fail_at = top, turns, hang_at, fail_at
        self._state = State()

    def reset(self, seed=None, episode_id=None, **kwargs):
        self._reset_rubric()
        self.target = random.Random(seed).randint(0, self.top)
        self._state = State(episode_id=episode_id, step_count=0)
        self.seed = seed
        return GuessObservation(message=f"guess a number from 0 to {self.top}")

    def step(self, action, timeout_s=None, **kwargs):
        self._state.step_count += 1
        if self._state.step_count == self.hang_at:
            time.sleep(30)
        if self._state.step_count == self.fail_at:
            raise RuntimeError(f"the simulator crashed at seed {self.seed}")
        try:
            g = int(action.guess)
        except ValueError:
            g = None
        close = 0.0 if g is None else max(0.0, 1 - abs(g - self.target) / (self.top + 1))
        word = "not a number" if g is None else "higher" if g < self.target else "lower" if g > self.target else "yes"
        obs = GuessObservation(
            message=f"{word} (episode {self._state.episode_id})",
            done=g == self.target or self._state.step_count >= self.turns,
            metadata={"closeness": close},
        )
        obs.reward = self._apply_rubric(action, obs)
        return obs

    @property
    def state(self):
        return self._state


def make_guess(top: int = 9):
    """A factory, as create_app takes one."""
    return GuessEnv(top=top)


class MoveAction(Action):
    dx: int
    dy: int


class GridObservation(Observation):
    x: int
    y: int


class GridEnv(Environment[MoveAction, GridObservation, State]):
    """An action of two fields: answers are JSON objects."""

    def reset(self, seed=None, episode_id=None, **kwargs):
        self.x = self.y = 0
        return GridObservation(x=0, y=0)

    def step(self, action, timeout_s=None, **kwargs):
        self.x, self.y = self.x + action.dx, self.y + action.dy
        return GridObservation(x=self.x, y=self.y, done=True, reward=float(self.x == 1 and self.y == 2))

    @property
    def state(self):
        return State()
'''

SERVER = """
import sys

import uvicorn
from openenv.core import create_app

from guess_env import GuessAction, GuessEnv, GuessObservation

app = create_app(GuessEnv, GuessAction, GuessObservation, max_concurrent_envs=64)
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="error")
"""


@pytest.fixture
def envdir(tmp_path, monkeypatch):
    (tmp_path / "guess_env.py").write_text(ENV)
    (tmp_path / "serve_guess.py").write_text(SERVER)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("guess_env", None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server(envdir):
    port = _free_port()
    log = (envdir / "server.log").open("w")  # a file, not a pipe: nobody reads it while the server runs
    proc = subprocess.Popen([sys.executable, "serve_guess.py", str(port)], cwd=envdir, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                raise RuntimeError(
                    f"the OpenEnv server did not start: {(envdir / 'server.log').read_text()[-2000:]}"
                ) from None
            time.sleep(0.2)
    yield url, proc
    proc.kill()
    proc.wait(timeout=10)
    log.close()


ANSWERS = ["5", "0", "9", "x", "3", " 7 ", "12", "4", "8", "1", "2", "6"]


async def _play(fam, task, answers):
    """Our episode's (observation, score, done) per answer, until done."""
    env = fam.make_env(task)
    out = [(await env.reset(), None, False)]
    for a in answers:
        res = await env.step(a)
        out.append((res.feedback, res.score, res.done))
        if res.done:
            break
    await env.close()
    return out, env.episode_id


def _direct(seed, episode_id, answers):
    """The same episode on the package's environment, called directly."""
    from guess_env import GuessAction, GuessEnv

    env = GuessEnv()
    obs = env.reset(seed=seed, episode_id=episode_id)
    out = [(obs.message, None, False)]
    for a in answers:
        obs = env.step(GuessAction(guess=a.strip()))
        out.append((obs.message, obs.reward, obs.done))
        if obs.done:
            break
    return out


def _client(url, seed, episode_id, answers):
    """The same episode through the package's own client and server."""
    from openenv.core import GenericEnvClient

    out = []
    with GenericEnvClient(base_url=url).sync() as c:
        r = c.reset(seed=seed, episode_id=episode_id)
        out.append((r.observation["message"], None, False))
        for a in answers:
            r = c.step({"guess": a.strip()})
            out.append((r.observation["message"], r.reward, r.done))
            if r.done:
                break
    return out


def _rotations(k):
    return [ANSWERS[i:] + ANSWERS[:i] for i in range(k)]


def test_in_process_steps_equal_the_environments_own(envdir):
    fam = make_family("openenv", env="guess_env:GuessEnv")
    n = 0
    for task in fam.tasks("train", 14, seed=1):
        for answers in _rotations(8):
            ours, eid = asyncio.run(_play(fam, task, answers))
            assert ours == _direct(task.meta["seed"], eid, answers)
            n += len(ours) - 1
    assert n >= 200


def test_server_steps_equal_the_packages_client(server):
    url, _ = server
    fam = make_family("openenv", url=url)
    assert fam.codec.field == "guess" and fam.codec.shown == "message"
    n = 0
    for task in fam.tasks("heldout", 14):
        for answers in _rotations(8):
            ours, eid = asyncio.run(_play(fam, task, answers))
            assert ours == _client(url, task.meta["seed"], eid, answers)
            n += len(ours) - 1
    assert n >= 200


def test_seeds_splits_and_episode_ids(envdir):
    fam = make_family("openenv", env="guess_env:GuessEnv")
    train = [t.meta["seed"] for s in (0, 1) for t in fam.tasks("train", 300, seed=s)]
    held = {t.meta["seed"] for t in fam.tasks("heldout", 100)}
    assert len(set(train)) == 600 and not held & set(train)
    t = fam.tasks("train", 1)[0]
    ids = set()
    for _ in range(3):  # a group: the same seed, its own episode id
        env = fam.make_env(t)
        obs = asyncio.run(env.reset())
        assert obs == "guess a number from 0 to 9" and env.session.env.seed == t.meta["seed"]
        ids.add(env.session.env.state.episode_id)
        asyncio.run(env.close())
    assert len(ids) == 3 and all(i.startswith(f"{t.id}/") for i in ids)


def test_a_factory_and_its_arguments_build_each_episodes_environment(envdir):
    fam = make_family("openenv", env="guess_env:make_guess", env_args={"top": 3})
    env = fam.make_env(fam.tasks("train", 1)[0])
    assert asyncio.run(env.reset()) == "guess a number from 0 to 3" and env.session.env.top == 3
    with pytest.raises(UserError, match="GuessObservation is not an openenv.core.Environment subclass"):
        make_family("openenv", env="guess_env:GuessObservation")


def test_an_answer_that_is_no_action_is_the_policys_error(envdir):
    fam = make_family("openenv", env="guess_env:GridEnv")
    t = fam.tasks("train", 1)[0]

    async def one(answer):
        env = fam.make_env(t)
        assert json.loads(await env.reset()) == {"x": 0, "y": 0}
        return await env.step(answer)

    ok = asyncio.run(one('```json\n{"dx": 1, "dy": 2}\n```'))
    assert ok.success and ok.done and ok.score == 1.0
    for bad, says in [
        ("go left", "JSON object with fields dx, dy"),
        ('{"dx": 1}', "missing dy"),
        ('{"dx": "a", "dy": 1}', "not a valid action"),
    ]:
        res = asyncio.run(one(bad))
        assert res.status == "parse_error" and says in res.feedback and not res.done


def test_a_hung_or_crashed_environment_is_an_env_error_with_its_cause(envdir):
    hung = make_family("openenv", env="guess_env:GuessEnv", env_args={"hang_at": 1}, timeout=1.0)
    crash = make_family("openenv", env="guess_env:GuessEnv", env_args={"fail_at": 2})

    async def run(fam, steps):
        env = fam.make_env(fam.tasks("train", 1)[0])
        await env.reset()
        out = [await _step(env, a) for a in steps]
        await env.close()
        return out

    t0 = time.time()
    ((res, _, err),) = asyncio.run(run(hung, ["4"]))
    assert time.time() - t0 < 10 and res.status == "env_error"
    assert "did not return within task.args.timeout=1 s" in err.message and err.kind == "OpenEnvError"
    first, (res, _, err) = asyncio.run(run(crash, ["4", "5"]))
    assert first[0].status == "step" and res.status == "env_error"  # a step that goes on: its observation alone
    assert err.kind == "RuntimeError" and "the simulator crashed" in err.message and "guess_env.py" in err.where


def test_a_server_that_dies_is_an_env_error(server):
    url, proc = server
    fam = make_family("openenv", url=url, timeout=5.0)

    async def run():
        env = fam.make_env(fam.tasks("train", 1)[0])
        await env.reset()
        first = await _step(env, "4")
        proc.kill()
        proc.wait(timeout=10)
        second = await _step(env, "5")
        await env.close()
        later = fam.make_env(fam.tasks("train", 1)[0])
        await later.reset()  # a reset that fails shows at the first step
        third = await _step(later, "5")
        return first, second, third

    first, (res, _, err), (res3, _, err3) = asyncio.run(run())
    assert first[2] is None and res.status == "env_error" and "step of episode" in err.message
    assert res3.status == "env_error" and "reset(seed=" in err3.message and "failed" in err3.message


def test_bad_arguments_say_what_to_give(envdir, server):
    url, _ = server
    with pytest.raises(UserError, match="one of them"):
        make_family("openenv")
    with pytest.raises(UserError, match="one of them"):
        make_family("openenv", env="guess_env:GuessEnv", url=url)
    with pytest.raises(UserError, match="env_args has no effect"):
        make_family("openenv", url=url, env_args={"top": 3})
    with pytest.raises(UserError, match="has no 'Nope'; its classes: .*GuessEnv"):
        make_family("openenv", env="guess_env:Nope")
    with pytest.raises(UserError, match="no field 'move'.*its fields: guess"):
        make_family("openenv", env="guess_env:GuessEnv", action_field="move")
    with pytest.raises(UserError, match="cannot read http://127.0.0.1:1/schema"):
        make_family("openenv", url="http://127.0.0.1:1", timeout=2)


def test_missing_package_says_how_to_install(monkeypatch):
    import tempering.envs.openenv as mod

    monkeypatch.setitem(sys.modules, "openenv.core", None)
    with pytest.raises(UserError, match=r"pip install 'tempering\[ecosystem\]'.*openenv-core==0.3.0"):
        mod._package()


def _train(envdir, out, *extra):
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "tempering.cli",
            "train",
            "model.name=tiny-xs",
            "task.family=openenv",
            *extra,
            "task.train_size=8",
            "task.heldout_size=4",
            "rollout.group_size=2",
            "rollout.prompts_per_step=2",
            "rollout.max_new_tokens=2",
            "rollout.max_turns=3",
            "run.steps=2",
            f"run.out_dir={out}",
            "run.eval_every=0",
            "run.checkpoint_every=0",
            "run.progress=false",
            "run.threads=1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=envdir,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(envdir), os.environ.get("PYTHONPATH", "")])},
    )


def _check_run(out, family_steps=(1, 2)):
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [x for x in rows if "reward" in x]
    assert [x["step"] for x in steps] == list(family_steps)
    samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert all(x["task"].startswith("openenv:") for x in samples)
    assert any(len(x["turns"]) > 1 for x in samples)  # the observations came back as feedback
    return steps


@pytest.mark.slow
def test_train_verb_in_process_and_against_a_server(envdir, server):
    r = _train(envdir, envdir / "local", "task.args.env=guess_env:GuessEnv")
    assert r.returncode == 0, r.stderr[-3000:]
    assert all("reward/rubric" in x for x in _check_run(envdir / "local"))
    url, _ = server
    r = _train(envdir, envdir / "remote", f"task.args.url={url}")
    assert r.returncode == 0, r.stderr[-3000:]
    _check_run(envdir / "remote")


@pytest.mark.slow
def test_env_errors_count_against_max_error_rate(envdir):
    r = _train(envdir, envdir / "stops", "task.args.env=guess_env:GuessEnv", "task.args.env_args.fail_at=1")
    assert r.returncode != 0
    assert "task.max_error_rate=0.02" in r.stderr and "the simulator crashed" in r.stderr
    r = _train(
        envdir,
        envdir / "goes_on",
        "task.args.env=guess_env:GuessEnv",
        "task.args.env_args.fail_at=2",
        "task.max_error_rate=1.0",
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert sum(x["env_errors"] for x in _check_run(envdir / "goes_on")) > 0
