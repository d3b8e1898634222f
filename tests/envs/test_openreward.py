"""OpenReward (ORS) environments through `task.family=openreward`, against a server built from the
`openreward` SDK's own `Server` and `Environment` (benchmarks/ecosystem_envs/ors_sums.py), reached
through the SDK's own client; a server that dies mid-episode."""

import asyncio
import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

if importlib.util.find_spec("openreward") is None:  # found, not imported: collection stays cheap
    pytest.skip("openreward is not installed", allow_module_level=True)

from tempering.envs.registry import make_family
from tempering.errors import UserError
from tempering.rollout.engine import _step

ENVS = Path(__file__).resolve().parents[2] / "benchmarks" / "ecosystem_envs"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve():
    port = _port()
    proc = subprocess.Popen(
        [sys.executable, "ors_sums.py", str(port)], cwd=ENVS, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.time() + 180  # the SDK imports slowly on a busy machine
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc, f"http://127.0.0.1:{port}"
        except OSError:
            assert proc.poll() is None, "the ORS server exited"
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("the ORS server did not start")


@pytest.fixture(scope="module")
def server():
    proc, url = _serve()
    yield url
    proc.kill()
    proc.wait()


def call(name, **args):
    return f"<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>"


async def _episode(env, answers):
    out = [await env.reset()]
    for a in answers:
        res, _, err = await _step(env, a)
        out.append((res, err))
        if res.done:
            break
    await env.close()
    return out


def test_the_servers_tasks_tools_and_rewards_come_through_the_sdk(server):
    with pytest.raises(UserError, match=r"serves 2 environments \(sums, sumsplain\); name one with task.args.env"):
        make_family("openreward", url=server)
    fam = make_family("openreward", url=server, env="sums")
    assert fam.env_name == "sums" and sorted(fam.by_name) == ["hint", "submit"]
    assert len(fam.split["train"]) == 12 and len(fam.split["heldout"]) == 12  # the server's test split
    task = fam.split["train"][1]
    spec = task.meta["task_spec"]
    right = spec["a"] + spec["b"]
    first, (hint, _), (done, _) = asyncio.run(
        _episode(fam.make_env(task), [call("hint"), f"so {call('submit', total=right)}"])
    )
    assert f"What is {spec['a']}+{spec['b']}?" in first and first.tools[1]["function"]["name"] == "submit"
    assert (hint.score, hint.done, hint.status) == (0.0, False, "tool_calls")
    assert hint.messages == [{"role": "tool", "name": "hint", "content": f"it ends in {right % 10}"}]
    assert (done.score, done.success, done.done) == (1.0, True, True)
    _, (bad, _), (plain, _) = asyncio.run(_episode(fam.make_env(task), [call("submit", total="x"), "no tool"]))
    assert bad.status == "tool_error" and "must be integer" in bad.messages[0]["content"]
    assert (plain.done, plain.success, plain.status) == (True, False, "incorrect")
    held = make_family("openreward", url=server, env="sums", heldout_split="none", heldout_share=0.25)
    assert (len(held.split["train"]), len(held.split["heldout"])) == (9, 3)
    with pytest.raises(UserError, match="has no split 'dev' \\(its splits: train, test\\)"):
        make_family("openreward", url=server, env="sums", split="dev")


def test_a_plain_answer_goes_to_the_terminal_tool(server):
    fam = make_family("openreward", url=server, env="sumsplain")
    assert sorted(fam.by_name) == ["hint", "submit"] and fam.terminal  # the terminal tool is not shown
    task = fam.split["heldout"][0]
    spec = task.meta["task_spec"]
    right = spec["a"] + spec["b"]
    _, (hint, _), (done, _) = asyncio.run(_episode(fam.make_env(task), [call("hint"), f"It is {right}."]))
    assert (hint.done, hint.messages[0]["content"]) == (False, f"it ends in {right % 10}")
    assert (done.score, done.success, done.done, done.status) == (1.0, True, True, "correct")
    _, (wrong, _) = asyncio.run(_episode(fam.make_env(task), [f"It is {right + 1}."]))
    assert (wrong.score, wrong.success, wrong.done, wrong.status) == (0.0, False, True, "incorrect")


@pytest.mark.slow  # a server of its own, and the client's retries
def test_a_server_that_drops_the_connection_is_one_line_naming_it():
    proc, url = _serve()
    # the dropped call ends when it passes this limit: 3 s (a call to the live local server takes well under 1 s)
    fam = make_family("openreward", url=url, env="sums", timeout=3)
    env = fam.make_env(fam.split["train"][0])

    async def go():
        await env.reset()
        proc.kill()
        proc.wait()
        res, _, err = await _step(env, call("submit", total=7))
        await env.close()
        return res, err

    res, err = asyncio.run(go())
    assert res.status == "env_error" and res.done
    assert err.message.startswith(f"UserError: OpenReward server {url} dropped the episode at submit(")
    assert "\n" not in err.message
    with pytest.raises(UserError, match=f"OpenReward server {url} cannot be reached"):
        make_family("openreward", url=url, env="sums", timeout=5)


@pytest.mark.slow
def test_tempering_train_runs_on_an_ors_server(server, tmp_path):
    out = tmp_path / "run"
    args = ["model.name=tiny-xs", "task.family=openreward", f"task.args.url={server}", "task.args.env=sums"]
    args += ["task.train_size=8"]
    args += ["task.heldout_size=2", "rollout.group_size=2", "rollout.prompts_per_step=2", "rollout.max_new_tokens=8"]
    args += ["rollout.max_turns=2", "run.steps=2", "run.eval_every=0", "run.progress=false", f"run.out_dir={out}"]
    r = subprocess.run(
        [sys.executable, "-m", "tempering.cli", "train", *args], capture_output=True, text=True, env=os.environ
    )
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in rows if "reward" in x] == [1, 2]
    assert all(x["env_errors"] == 0 for x in rows if "reward" in x)


def test_a_missing_sdk_says_how_to_install(monkeypatch):
    for name in ("openreward", "openreward.api", "openreward.api.environments", "openreward.api.errors"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(UserError, match="pip install --no-deps openreward==0.1.167"):
        make_family("openreward", url="http://127.0.0.1:9")
