"""Ecosystem task families through tempering: reasoning-gym's generators, a verifiers taskset and an
OpenEnv environment, as the packages ship them, and tool-calling rollouts.

    python benchmarks/ecosystem.py [--only reasoning_gym,verifiers,openenv,tools,verl,trackio,openreward,
                                          cross_tokenizer,tool_drift]
                                   [--train-tasks 10] [--heldout-tasks 3] [--steps 3] [--verl PATH]
                                   [--seeds 0 1 2] [--drift-episodes 24]

reasoning_gym, for every generator the package registers (its `composite` combinator aside):
- loaded: the family builds it with its default config and draws train and held-out tasks;
- score agreement: for each drawn task, the right answer (the entry's, or the package's example for
  questions with many right answers), other tasks' answers, mutations of the right one and a
  completion with no answer tag, scored by the family's env (the completion with the answer inside
  `<answer>` tags) and by the package's `score_answer` on the answer itself (None without a tag;
  answers are stripped, as the tag's text is read stripped);
- overlap: train questions that are also held-out questions (must be 0).
Then `tempering train` runs a few steps on the tiny model for a single generator and a composite.

verifiers: the taskset in benchmarks/ecosystem_envs/vf_sums.py (the package's own form: weighted
`@vf.reward` methods, one returning keyed scores), loaded through its `load_environment` and as a
taskset package, and the package's own tasksets (`verifiers.v1.tasksets`), which the family refuses
or loads; agreement: each answer's score against the package's `Task.score` then `trace.reward`.
openenv: the environment in benchmarks/ecosystem_envs/oe_guess.py (a Rubric, seeded resets), in
process and behind the package's own server on 127.0.0.1; agreement: each step's observation,
reward and done against the environment called directly and against the package's client.
Each trains a few steps through `tempering train`.
tools: tool-call parsing and malformed calls on text real chat templates and a real model wrote
(benchmarks/ecosystem_tools.py says how).
verl (needs --verl PATH, a volcengine/verl checkout): the rows in tests/envs/data/verl/ (written by verl's own
preprocessing) read; verl's GSM8K scorer as a user's compute_score, the family's score against calling it
directly; `--from-verl` on verl's own trainer config and a GRPO example's overrides (verl's rows are chat
messages: training on them needs a model with a chat template, e.g. model.name=smollm2-135m-instruct).
trackio: a run with run.trackio to a local project, every number of metrics.jsonl read back from trackio.
openreward: benchmarks/ecosystem_envs/ors_sums.py behind the SDK's own Server, each turn against the SDK
client's own session on the same calls; a few training steps on each environment.
cross_tokenizer: on-policy distillation from a teacher with another tokenizer against one with the
student's own, both ways between the character tokenizer and SmolLM2's (benchmarks/ecosystem_xtok.py).
tool_drift: tool episodes whose conversation a chat template re-renders otherwise than the tokens
sampled: realigned and forked training rows (benchmarks/ecosystem_drift.py).

Writes docs/results/ecosystem.md and ecosystem.json; with --only, the other parts are kept from the
JSON as an earlier run of this script wrote them, each with its own command and machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ecosystem_drift as drift_part
import ecosystem_tools as tools_part
import ecosystem_xtok as xtok_part
import torch

from tempering.envs.reasoning_gym import generator_names
from tempering.envs.registry import make_family

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "results"
ENVS = Path(__file__).resolve().parent / "ecosystem_envs"
PARTS = (
    "reasoning_gym",
    "verifiers",
    "openenv",
    "tools",
    "verl",
    "trackio",
    "openreward",
    "cross_tokenizer",
    "tool_drift",
)
KEYS = {
    "verl": ("rows_read", "compute_score_agreement", "config_keys_converted"),
    "trackio": ("logged", "values"),
    "openreward": ("loaded", "trained", "turn_agreement"),
}
"""The keys of each new part's summary that the issue names (printed as the part ends)."""
RG_KEYS = ("machine", "package_version", "generators", "train", "reasoning_gym")
"""The report's keys the reasoning_gym part writes (the others write one key each, their name)."""
TRAIN_RUNS = {"basic_arithmetic": "basic_arithmetic", "chain_sum+spell_backward": {"chain_sum": 2, "spell_backward": 1}}


def machine() -> dict:
    torch.set_num_threads(2)
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    a @ b
    t, reps = time.perf_counter(), 20
    for _ in range(reps):
        a @ b
    gflops = 2 * 1024**3 * reps / (time.perf_counter() - t) / 1e9
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "matmul_gflops_2_threads": round(gflops, 1),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def _right(entry: dict):
    meta = entry["metadata"]
    return entry["answer"] if entry["answer"] is not None else meta.get("example_answer", meta.get("possible_answer"))


def check_generator(name: str, n_train: int, n_held: int, rng: random.Random) -> dict:
    t0 = time.perf_counter()
    try:
        fam = make_family("reasoning_gym", name=name)
        train = fam.tasks("train", n_train, seed=0)
        held = fam.tasks("heldout", n_held, seed=0)
    except Exception as e:
        return {"loaded": False, "error": f"{type(e).__name__}: {str(e)[:300]}", "seconds": time.perf_counter() - t0}
    overlap = len({t.meta["entry"]["question"] for t in train} & {t.meta["entry"]["question"] for t in held})
    right = [_right(t.meta["entry"]) for t in train]
    answers = equal = raised = full = 0
    disagree = []
    for t, a in zip(train, right):
        a = "" if a is None else str(a)
        others = [str(x) for x in right if x is not None]
        made = [a, rng.choice(others) if others else "0", f"{a} {a}", f"x {a}", a[:-1], a[::-1]]
        for cand in [*(c.strip() for c in made), None]:  # the tag's text is read stripped
            completion = "no answer given" if cand is None else f"Thinking.\n<answer>{cand}</answer>"
            try:
                want = float(fam.scorer.score_answer(cand, t.meta["entry"]))
            except Exception:
                raised += 1
                continue
            got = asyncio.run(fam.make_env(t).step(completion)).score
            answers += 1
            equal += got == want
            full += want == 1.0
            if got != want and len(disagree) < 3:
                disagree.append({"answer": cand, "family": got, "package": want})
    return {
        "loaded": True,
        "answers": answers,
        "equal": equal,
        "package_scorer_raised": raised,
        "full_marks": full,
        "disagreements": disagree,
        "heldout_overlap": overlap,
        "seconds": round(time.perf_counter() - t0, 2),
    }


def train_run(label: str, name, steps: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        cmd = [
            sys.executable,
            "-m",
            "tempering.cli",
            "train",
            "model.name=tiny-xs",
            "optim.lr=3e-4",  # trained from scratch: the tiny model's rate, not the pretrained default
            "task.family=reasoning_gym",
            f"task.args.name={json.dumps(name)}",
            "task.train_size=32",
            "task.heldout_size=4",
            "rollout.group_size=2",
            "rollout.prompts_per_step=4",
            "rollout.max_new_tokens=8",
            "rollout.max_turns=2",
            f"run.steps={steps}",
            f"run.out_dir={out}",
            "run.eval_every=0",
            "run.checkpoint_every=0",
            "run.progress=false",
            "run.threads=2",
        ]
        t0 = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        wall = time.perf_counter() - t0
        if r.returncode != 0:
            return {"generator": label, "ok": False, "error": r.stderr[-600:], "seconds": round(wall, 1)}
        rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
        rows = [x for x in rows if "reward" in x]
        return {
            "generator": label,
            "ok": len(rows) == steps,
            "steps": len(rows),
            "reward": [round(x["reward"], 4) for x in rows],
            "seconds": round(wall, 1),
        }


def cli_train(label: str, args: list[str], steps: int, env: dict | None = None) -> dict:
    """A few steps of `tempering train` on the tiny model; the reward of each step."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "tempering.cli", "train", "model.name=tiny-xs", *args, f"run.steps={steps}"]
        cmd += [
            "optim.lr=3e-4",
            f"run.out_dir={out}",
            "run.eval_every=0",
            "run.checkpoint_every=0",
            "run.progress=false",
        ]
        t0 = time.perf_counter()
        r = subprocess.run(cmd + ["run.threads=2"], capture_output=True, text=True, cwd=ENVS, env=env)
        wall = round(time.perf_counter() - t0, 1)
        if r.returncode != 0:
            return {"run": label, "ok": False, "error": r.stderr[-600:], "seconds": wall}
        rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
        rows = [x for x in rows if "reward" in x]
        parts = sorted({k for x in rows for k in x if k.startswith("reward/")})
        return {
            "run": label,
            "ok": len(rows) == steps,
            "steps": len(rows),
            "reward": [round(x["reward"], 4) for x in rows],
            "logged": parts,
            "env_errors": sum(x.get("env_errors", 0) for x in rows),
            "seconds": wall,
        }


def _package_trace(vf, vf_task, messages: list[dict]):
    """The package's own scoring of a conversation: its Trace, `Task.score`, then `trace.reward`."""
    from verifiers.v1.graph import MessageNode
    from verifiers.v1.trace import AgentInfo, TraceTask
    from verifiers.v1.types import AssistantMessage, SystemMessage, UserMessage

    kinds = {"system": SystemMessage, "user": UserMessage, "assistant": AssistantMessage}
    nodes = [
        MessageNode(
            parent=i - 1 if i else None,
            message=kinds[m["role"]](content=m["content"]),
            sampled=m["role"] == "assistant",
        )
        for i, m in enumerate(messages)
    ]
    trace = vf.Trace(
        task=TraceTask(type=type(vf_task).__name__, data=vf_task.data, key=vf_task.key, hash=vf_task.hash),
        agent=AgentInfo(config=vf.AgentConfig()),
        nodes=nodes,
    )
    asyncio.run(vf_task.score(trace))
    return trace


VF_ENVS = {
    "vf_sums (load_environment)": {"env": "vf_sums", "args": {"n": 200}},
    "vf_chat (taskset package, system prompt)": {"env": "vf_chat", "args": {"n": 100, "system": "Give the sum only."}},
}


def check_verifiers(steps: int) -> dict:
    import importlib.metadata
    import pkgutil

    import verifiers.v1 as vf
    import verifiers.v1.tasksets

    if str(ENVS) not in sys.path:
        sys.path.insert(0, str(ENVS))
    tried = dict(VF_ENVS)
    tried.update(
        {
            f"{m.name} (the package's own taskset)": {"env": m.name}
            for m in pkgutil.iter_modules(verifiers.v1.tasksets.__path__)
        }
    )
    envs, answers, equal, disagree = {}, 0, 0, []
    for label, spec in tried.items():
        try:
            fam = make_family("verifiers", **spec)
        except Exception as e:
            envs[label] = {"loaded": False, "reason": f"{type(e).__name__}: {str(e)[:300]}"}
            continue
        n = same = 0
        for t in fam.split["train"] + fam.split["heldout"]:
            vf_task = fam.vf_tasks[t.id]
            right = vf_task.data.answer
            for a in [right, f" {right} ", right + "0", right[:-1], right[::-1], "7", f"{right} {right}", ""]:
                res = asyncio.run(fam.make_env(t).step(a))
                msgs = [*fam.messages(vf_task), {"role": "assistant", "content": a}]
                want = _package_trace(vf, vf_task, msgs).reward
                n += 1
                same += res.score == want
                if res.score != want and len(disagree) < 5:
                    disagree.append({"env": label, "answer": a, "family": res.score, "package": want})
        envs[label] = {
            "loaded": True,
            "train_tasks": fam.split_size("train"),
            "heldout_tasks": fam.split_size("heldout"),
            "answers": n,
            "equal": same,
        }
        answers, equal = answers + n, equal + same
    try:  # a multi-turn environment: its own run() plays the exchange, the policy in its seat
        game = make_family("verifiers", env="vf_game")
        envs["vf_game (multi-turn Env.run, one seat)"] = {
            "loaded": True,
            "train_tasks": game.split_size("train"),
            "heldout_tasks": game.split_size("heldout"),
            "answers": 0,
            "equal": 0,
        }
    except Exception as e:
        envs["vf_game (multi-turn Env.run, one seat)"] = {"loaded": False, "reason": f"{type(e).__name__}: {e}"}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ENVS), os.environ.get("PYTHONPATH", "")])}
    common = ["task.train_size=32", "task.heldout_size=4", "rollout.group_size=2", "rollout.prompts_per_step=4"]
    runs = [
        cli_train(
            "vf_sums, two turns",
            [
                "task.family=verifiers",
                "task.args.env=vf_sums",
                *common,
                "rollout.max_new_tokens=4",
                "rollout.max_turns=2",
            ],
            steps,
            env,
        ),
        cli_train(
            "vf_game, three turns",
            [
                "task.family=verifiers",
                "task.args.env=vf_game",
                *common,
                "rollout.max_new_tokens=3",
                "rollout.max_turns=3",
            ],
            steps,
            env,
        ),
    ]
    return {
        "package_version": importlib.metadata.version("verifiers"),
        "summary": {
            "loaded": sum(e["loaded"] for e in envs.values()),
            "tried": len(envs),
            "trained": [r["run"] for r in runs if r["ok"]],
            "score_agreement": equal / answers if answers else 0.0,
            "answers_scored": answers,
        },
        "envs": envs,
        "disagreements": disagree,
        "train": runs,
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _served(script: str, what: str, wait: float = 120):
    """The base URL of `python ENVS/script PORT` on 127.0.0.1 once it accepts connections; the server is
    killed on leaving."""
    port = _free_port()
    with tempfile.TemporaryFile("w+") as log:
        server = subprocess.Popen([sys.executable, script, str(port)], cwd=ENVS, stdout=log, stderr=log)
        try:
            deadline = time.time() + wait
            while True:
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=1):
                        break
                except OSError:
                    if server.poll() is not None or time.time() > deadline:
                        log.seek(0)
                        raise RuntimeError(f"the {what} server did not start: {log.read()[-1000:]}") from None
                    time.sleep(0.2)
            yield f"http://127.0.0.1:{port}"
        finally:
            server.kill()
            server.wait(timeout=10)


GUESSES = ["5", "0", "9", "x", "3", " 7 ", "12", "4", "8", "1", "2", "6"]


def _episodes(fam, tasks, rotations: int, reference) -> tuple[int, int, list]:
    """Steps of our episodes equal to the reference's (observation, reward, done), over answer orders."""
    steps = same = 0
    bad: list = []

    async def ours(task, answers):
        env = fam.make_env(task)
        out = [(await env.reset(), None, False)]
        for a in answers:
            res = await env.step(a)
            out.append((res.feedback, res.score, res.done))
            if res.done:
                break
        await env.close()
        return out, env.episode_id

    for task in tasks:
        for k in range(rotations):
            answers = GUESSES[k:] + GUESSES[:k]
            got, eid = asyncio.run(ours(task, answers))
            want = reference(task.meta["seed"], eid, answers)
            steps += len(got) - 1
            same += sum(a == b for a, b in zip(got[1:], want[1:])) if got[0] == want[0] and len(got) == len(want) else 0
            if got != want and len(bad) < 3:
                bad.append({"seed": task.meta["seed"], "answers": answers, "family": got, "package": want})
    return steps, same, bad


def check_openenv(steps: int) -> dict:
    import importlib.metadata

    from openenv.core import GenericEnvClient

    if str(ENVS) not in sys.path:
        sys.path.insert(0, str(ENVS))
    from oe_guess import GuessAction, GuessEnv

    def direct(seed, episode_id, answers):
        env = GuessEnv()
        out = [(env.reset(seed=seed, episode_id=episode_id).message, None, False)]
        for a in answers:
            obs = env.step(GuessAction(guess=a.strip()))
            out.append((obs.message, obs.reward, obs.done))
            if obs.done:
                break
        return out

    modes: dict = {}
    fam = make_family("openenv", env="oe_guess:GuessEnv")
    n, same, bad = _episodes(fam, fam.tasks("train", 20, seed=2), 6, direct)
    modes["in process"] = {"loaded": True, "steps": n, "equal": same, "disagreements": bad}
    with _served("oe_guess.py", "OpenEnv", wait=60) as url:

        def client(seed, episode_id, answers):
            with GenericEnvClient(base_url=url).sync() as c:
                r = c.reset(seed=seed, episode_id=episode_id)
                out = [(r.observation["message"], None, False)]
                for a in answers:
                    r = c.step({"guess": a.strip()})
                    out.append((r.observation["message"], r.reward, r.done))
                    if r.done:
                        break
            return out

        fam = make_family("openenv", url=url)
        n, same, bad = _episodes(fam, fam.tasks("heldout", 20), 6, client)
        modes["server (WebSocket, 127.0.0.1)"] = {"loaded": True, "steps": n, "equal": same, "disagreements": bad}
        common = ["task.train_size=16", "task.heldout_size=4", "rollout.group_size=2", "rollout.prompts_per_step=4"]
        common += ["rollout.max_new_tokens=2", "rollout.max_turns=3"]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ENVS), os.environ.get("PYTHONPATH", "")])}
        runs = [
            cli_train(
                "oe_guess in process",
                ["task.family=openenv", "task.args.env=oe_guess:GuessEnv", *common],
                steps,
                env,
            ),
            cli_train("oe_guess over the server", ["task.family=openenv", f"task.args.url={url}", *common], steps, env),
        ]
    total = sum(m["steps"] for m in modes.values())
    return {
        "package_version": importlib.metadata.version("openenv-core"),
        "summary": {
            "loaded": sum(m["loaded"] for m in modes.values()),
            "tried": len(modes),
            "trained": [r["run"] for r in runs if r["ok"]],
            "score_agreement": sum(m["equal"] for m in modes.values()) / total if total else 0.0,
            "steps_compared": total,
        },
        "modes": modes,
        "train": runs,
    }


VERL_DATA = ROOT / "tests" / "envs" / "data" / "verl"


def _verl_reward_file(verl: str, folder: Path) -> Path:
    """A user's reward file in verl's `custom_reward_function` form: verl's own GSM8K scorer
    (verl/utils/reward_score/gsm8k.py of the checkout) behind verl's custom-function signature, sync with a
    float and async with a dict."""
    src = subprocess.run(
        ["git", "-C", verl, "show", "HEAD:verl/utils/reward_score/gsm8k.py"], capture_output=True, text=True, check=True
    ).stdout
    path = folder / "verl_gsm8k_reward.py"
    path.write_text(
        src + "\n\n_gsm8k_score = compute_score\n\n\n"
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    return _gsm8k_score(solution_str, ground_truth, format_score=0.1)\n\n\n"
        "async def compute_score_dict(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    flexible = _gsm8k_score(solution_str, ground_truth, method='flexible')\n"
        "    return {'score': float(_gsm8k_score(solution_str, ground_truth)), 'flexible': float(flexible)}\n"
    )
    return path


def _verl_answers(task) -> list[str]:
    truth = task.answer
    worked = task.meta["extra_info"].get("answer", "")
    return [worked, f"#### {truth}", f"so #### {int(truth) + 1}", f"it is {truth}", f"#### {int(truth):,}", ""]


def check_verl(verl: str | None) -> dict:
    """Rows verl's own preprocessing wrote, read by `task.family=dataset`; verl's GSM8K scorer as a user's
    compute_score, scored through the family and called directly; `--from-verl` on verl's own configs."""
    import importlib.util

    from tempering.envs.dataset import DatasetFamily
    from tempering.rollout.engine import _step
    from tempering.verl_names import convert, load

    if verl is None:
        raise SystemExit("--only verl needs --verl PATH (a volcengine/verl checkout or git directory)")
    files = {p.name: p for p in (VERL_DATA / "gsm8k_train.parquet", VERL_DATA / "gsm8k_train.jsonl")}
    rows = {
        name: len(DatasetFamily(str(p), reward="exact", heldout_share=0).split["train"]) for name, p in files.items()
    }
    commit = subprocess.run(["git", "-C", verl, "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    with tempfile.TemporaryDirectory() as tmp:
        reward = _verl_reward_file(verl, Path(tmp))
        spec = importlib.util.spec_from_file_location("verl_gsm8k_direct", reward)
        direct = importlib.util.module_from_spec(spec)  # the user's functions, called as verl calls them
        spec.loader.exec_module(direct)
        scored = same = 0
        bad: list = []
        for name, path in files.items():
            for fn in ("compute_score", "compute_score_dict"):
                fam = make_family("dataset", train=str(path), reward=f"{reward}:{fn}", heldout_share=0)
                for task in fam.split["train"]:
                    for answer in _verl_answers(task):
                        res, _, err = asyncio.run(_step(fam.make_env(task), answer, [1, 2]))
                        want = getattr(direct, fn)(
                            task.meta["data_source"], answer, task.answer, task.meta["extra_info"]
                        )
                        if asyncio.iscoroutine(want):
                            want = asyncio.run(want)
                        want = float(want["score"] if isinstance(want, dict) else want)
                        scored += 1
                        ok = err is None and res.score == want
                        same += ok
                        if not ok and len(bad) < 3:
                            bad.append(
                                {"file": name, "function": fn, "answer": answer, "family": res.score, "direct": want}
                            )
    configs = {
        "ppo_trainer.yaml": [str(VERL_DATA / "ppo_trainer.yaml")],
        "ppo_trainer.yaml + run_qwen2-7b.sh": [str(VERL_DATA / "ppo_trainer.yaml"), str(VERL_DATA / "run_qwen2-7b.sh")],
    }
    conversions = {}
    for label, paths in configs.items():
        c = convert(load(paths, lambda p: Path(p).read_text()))
        given = [k for k in c.mapped if k not in c.defaults]
        conversions[label] = {
            "verb": c.verb,
            "converted": len(given),
            "defaults_carried": len(c.mapped) - len(given),
            "tempering_keys": len(c.keys),
            "not_mapped": sum(len(v) for v in c.missing.values()),
            "unread": len(c.unread),
        }
    return {
        "verl_commit": commit.stdout.strip(),
        "summary": {
            "rows_read": sum(rows.values()),
            "compute_score_agreement": same / scored if scored else 0.0,
            "config_keys_converted": conversions["ppo_trainer.yaml + run_qwen2-7b.sh"]["converted"],
        },
        "rows": rows,
        "scored": scored,
        "disagreements": bad,
        "configs": conversions,
    }


def check_trackio(steps: int) -> dict:
    """A `tempering train` run with run.trackio to a local project; every number of metrics.jsonl read back
    from trackio's own storage."""
    import importlib.metadata

    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "TRACKIO_DIR": str(Path(tmp) / "trackio")}
        out = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "tempering.cli", "train", "model.name=tiny-xs", "task.train_size=16"]
        cmd += ["task.heldout_size=2", "rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=4"]
        cmd += [f"run.steps={steps}", "run.eval_every=0", "run.progress=false", "run.trackio=tempering-bench"]
        cmd += [f"run.out_dir={out}", "run.checkpoint_every=0", "run.threads=2"]
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
        if r.returncode != 0:
            raise RuntimeError(f"the trackio run failed: {r.stderr[-1000:]}")
        name = (out / "trackio_run").read_text().strip()
        code = (
            "import json; from trackio.sqlite_storage import SQLiteStorage as S; "
            f"print(json.dumps(S.get_logs('tempering-bench', {name!r}), default=str))"
        )
        read = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        logs = json.loads(read.stdout)
        rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    values = equal = 0
    for row in rows:
        logged = {k: v for x in logs if x.get("step") == row["step"] for k, v in x.items()}
        for k, v in row.items():
            if k != "step" and isinstance(v, (int, float)) and v is not None:
                values += 1
                equal += logged.get(k) == v
    tables = [x for x in logs if "samples" in x]
    return {
        "package_version": importlib.metadata.version("trackio"),
        "summary": {"logged": equal, "values": values, "metric_rows": len(rows), "sample_tables": len(tables)},
    }


OPENREWARD_SCRIPTS = {
    # per environment: answers as (tool, arguments) calls or plain text; {t} is the right total
    "sums": [
        [("hint", {}), ("submit", {"total": "{t}"})],
        [("submit", {"total": "{t+1}"})],
        [("nope", {}), ("submit", {"total": "{t}"})],
    ],
    "sumsplain": [["It is {t}."], [("hint", {}), "{t+1}"], [("hint", {}), ("hint", {}), "so {t}"]],
}


def _fill(x, total: int):
    if isinstance(x, str):
        return x.replace("{t}", str(total)).replace("{t+1}", str(total + 1))
    if isinstance(x, dict):
        return {k: int(_fill(v, total)) if v in ("{t}", "{t+1}") else v for k, v in x.items()}
    return tuple(_fill(v, total) for v in x)


def _plain(turns: list) -> list:
    """Turns with each refusal as `error` (the family refuses a call its schema refuses before the server
    sees it, in words of its own)."""
    return [([("error" if o.startswith("error:") else o) for o in outs], score, done) for outs, score, done in turns]


def check_openreward(steps: int) -> dict:
    """The environments of benchmarks/ecosystem_envs/ors_sums.py behind the SDK's own Server: each turn of
    the family's episodes (tool outputs, reward so far, finished) against the SDK client's own session on
    the same calls; then a few steps of `tempering train` on each."""
    import importlib.metadata

    from openreward.api.environments import client, types
    from openreward.api.errors import ToolCallError

    def as_text(a) -> str:
        if isinstance(a, str):
            return a
        return f"<tool_call>{json.dumps({'name': a[0], 'arguments': a[1]})}</tool_call>"

    async def ours(fam, task, answers):
        env = fam.make_env(task)
        await env.reset()
        out = []
        for a in answers:
            res = await env.step(as_text(a))
            outputs = [m["content"] for m in res.messages or []]
            out.append((outputs, res.score, res.done))
            if res.done:
                break
        await env.close()
        return out

    async def sdk(url, env_name, spec, answers):
        api = client.AsyncEnvironmentsAPI(base_url=url, api_key=None)
        task = types.Task(server_name=env_name, environment_name=env_name, task_spec=spec, namespace=None)
        out, total = [], 0.0
        try:
            async with api.get(env_name, variant=env_name).session(task=task) as s:
                for a in answers:
                    try:
                        r = await (s.call_terminal_tool(a) if isinstance(a, str) else s.call_tool(a[0], a[1]))
                        text, reward, finished = r.blocks[0].text, r.reward or 0.0, r.finished
                    except ToolCallError as e:
                        text, reward, finished = f"error: {e}", 0.0, False
                    total += reward
                    final = finished or isinstance(a, str)
                    out.append(([] if final else [text], total, final))
                    if final:
                        break
        finally:
            await api.aclose()
        return out

    modes: dict = {}
    runs: list = []
    with _served("ors_sums.py", "ORS") as url:
        for env_name, scripts in OPENREWARD_SCRIPTS.items():
            fam = make_family("openreward", url=url, env=env_name)
            turns = same = 0
            bad: list = []
            for task in fam.split["train"] + fam.split["heldout"]:
                spec = task.meta["task_spec"]
                for script in scripts:
                    answers = [_fill(a, spec["a"] + spec["b"]) for a in script]
                    got = _plain(asyncio.run(ours(fam, task, answers)))
                    want = _plain(asyncio.run(sdk(url, env_name, spec, answers)))
                    turns += len(want)
                    same += sum(a == b for a, b in zip(got, want)) if len(got) == len(want) else 0
                    if got != want and len(bad) < 3:
                        bad.append({"task": spec["id"], "answers": answers, "family": got, "sdk": want})
            modes[env_name] = {
                "loaded": True,
                "tasks": {"train": len(fam.split["train"]), "heldout": len(fam.split["heldout"])},
                "turns": turns,
                "equal": same,
                "disagreements": bad,
            }
            runs.append(
                cli_train(
                    f"{env_name} over the server",
                    ["task.family=openreward", f"task.args.url={url}", f"task.args.env={env_name}"]
                    + ["task.train_size=8", "task.heldout_size=2", "rollout.group_size=2"]
                    + ["rollout.prompts_per_step=2", "rollout.max_new_tokens=8", "rollout.max_turns=2"],
                    steps,
                )
            )
    total = sum(m["turns"] for m in modes.values())
    return {
        "package_version": importlib.metadata.version("openreward"),
        "summary": {
            "loaded": sum(m["loaded"] for m in modes.values()),
            "tried": len(OPENREWARD_SCRIPTS),
            "trained": [r["run"] for r in runs if r["ok"]],
            "turn_agreement": sum(m["equal"] for m in modes.values()) / total if total else 0.0,
            "turns_compared": total,
        },
        "modes": modes,
        "train": runs,
    }


def _machine_line(m: dict) -> str:
    return (
        f"Machine: {m['platform']}, Python {m['python']}, {m['cpus']} CPUs, a 1024^3 float32 matmul at "
        f"{m['matmul_gflops_2_threads']} GFLOP/s on 2 threads, load average {m['load_average']} at the start."
    )


def _train_table(runs: list[dict], first: str) -> list[str]:
    rows = [f"| {first} | steps | reward per step | logged | env errors | seconds |", "|---|---|---|---|---|---|"]
    for r in runs:
        logged = ", ".join(r.get("logged", [])) or "-"
        rows.append(
            f"| {r.get('run', r.get('generator'))} | {r.get('steps', 0)} | {r.get('reward', r.get('error', '-'))} | "
            f"{logged} | {r.get('env_errors', '-')} | {r['seconds']} |"
        )
    return rows


def render_reasoning_gym(report: dict) -> list[str]:
    rg, m = report["reasoning_gym"], report["machine"]
    gens = report["generators"]
    failed = [f"- {n}: {g['error']}" for n, g in gens.items() if not g["loaded"]]
    disagree = [f"- {n}: {g['disagreements']}" for n, g in gens.items() if g.get("disagreements")]
    raised = [f"{n} ({g['package_scorer_raised']})" for n, g in gens.items() if g.get("package_scorer_raised")]
    runs = [
        f"| {r['generator']} | {r.get('steps', 0)} | {r.get('reward', '-')} | {r['seconds']} |" for r in report["train"]
    ]
    slowest = sorted(((g["seconds"], n) for n, g in gens.items()), reverse=True)[:5]
    return [
        f"## reasoning_gym (reasoning-gym {report['package_version']})",
        "",
        f"Generated by `{report['commands']['reasoning_gym']}`.",
        "",
        _machine_line(m),
        "",
        f"- generators loaded: {rg['generators_loaded']} of {rg['generators_total']} registered (the package's "
        "`composite` combinator aside; it is what `name: {generator: weight}` builds)",
        f"- score agreement: {rg['score_agreement']:.4f} of {rg['answers_scored']} answers, the family's score "
        "equal to the package's `score_answer` (right answers, other tasks' answers, mutations, no tag)",
        f"- answers with full marks among them: {rg['full_marks']}",
        f"- train questions also in the held-out split: {rg['heldout_overlap']}",
        f"- trained a few steps: {', '.join(rg['trained']) or 'none'}",
        f"- answers the package's own scorer raised on (left out of the agreement): {', '.join(raised) or 'none'}",
        f"- slowest generators to build and draw: {', '.join(f'{n} ({s:.1f} s)' for s, n in slowest)}",
        "",
        "Generators that did not load:",
        "",
        *(failed or ["- none"]),
        "",
        "Disagreements (first few per generator):",
        "",
        *(disagree or ["- none"]),
        "",
        "### Training through `tempering train` (tiny-xs, two turns, feedback from the verdict)",
        "",
        "| generator | steps | reward per step | seconds |",
        "|---|---|---|---|",
        *runs,
        "",
    ]


def render_verifiers(v: dict) -> list[str]:
    rows = [
        "| environment | loaded | tasks (train / held-out) | answers | equal to the package | why not |",
        "|---|---|---|---|---|---|",
    ]
    for label, e in v["envs"].items():
        if e["loaded"]:
            rows.append(
                f"| {label} | yes | {e['train_tasks']} / {e['heldout_tasks']} | {e['answers']} | {e['equal']} | |"
            )
        else:
            rows.append(f"| {label} | no | | | | {e['reason'].replace('|', '/')} |")
    return [
        f"## verifiers (verifiers {v['package_version']})",
        "",
        f"Generated by `{v['command']}`.",
        "",
        _machine_line(v["machine"]),
        "",
        f"- loaded: {v['loaded']} of {v['tried']} tasksets tried",
        f"- score agreement: {v['score_agreement']:.4f} of {v['answers_scored']} answers, the family's score equal to "
        "the package's `Task.score` then `trace.reward` (right answers, padded, mutated, other numbers, empty; on the "
        "single-turn tasksets: the multi-turn one's final score is the same task rewards plus what its run records, "
        "checked on hand-computed games in tests/envs/test_verifiers.py)",
        f"- trained a few steps: {', '.join(v['trained']) or 'none'}",
        f"- disagreements: {v['disagreements'] or 'none'}",
        "",
        *rows,
        "",
        "### Training through `tempering train` (tiny-xs; the score, or the game's hint, as feedback)",
        "",
        *_train_table(v["train"], "run"),
        "",
    ]


def render_openenv(o: dict) -> list[str]:
    rows = ["| mode | steps compared | equal to the package | first disagreements |", "|---|---|---|---|"]
    for label, mode in o["modes"].items():
        rows.append(f"| {label} | {mode['steps']} | {mode['equal']} | {mode['disagreements'] or 'none'} |")
    return [
        f"## openenv (openenv-core {o['package_version']})",
        "",
        f"Generated by `{o['command']}`.",
        "",
        _machine_line(o["machine"]),
        "",
        f"- loaded: {o['loaded']} of {o['tried']} ways of running the environment",
        f"- score agreement: {o['score_agreement']:.4f} of {o['steps_compared']} steps, the family's observation, "
        "reward and done equal to the environment's own (called directly in process; through the package's client "
        "against its server), same seeds and episode ids",
        f"- trained a few steps: {', '.join(o['trained']) or 'none'}",
        "",
        *rows,
        "",
        "### Training through `tempering train` (tiny-xs, up to three turns, the observation as feedback)",
        "",
        *_train_table(o["train"], "run"),
        "",
    ]


def render_part(part, name: str):
    def draw(d: dict) -> list[str]:
        head, *rest = part.render(d)
        return [head, "", f"Generated by `{d['command']}`.", "", _machine_line(d["machine"]), *rest]

    return name, draw


def _head(title: str, part: dict) -> list[str]:
    return [title, "", f"Generated by `{part['command']}`.", "", _machine_line(part["machine"]), ""]


def render_verl(v: dict) -> list[str]:
    rows = ["| config | verb | converted | verl defaults carried | tempering keys | not mapped | not read |"]
    rows.append("|---|---|---|---|---|---|---|")
    for label, c in v["configs"].items():
        rows.append(
            f"| {label} | {c['verb']} | {c['converted']} | {c['defaults_carried']} | {c['tempering_keys']} | "
            f"{c['not_mapped']} | {c['unread']} |"
        )
    return [
        *_head(f"## verl (data, compute_score and --from-verl; verl {v['verl_commit'][:12]})", v),
        f"- rows read: {v['rows_read']} ({', '.join(f'{k}: {n}' for k, n in v['rows'].items())}), written by the "
        "row-building function of verl's examples/data_preprocess/gsm8k.py (tests/envs/data/verl/SOURCE.md)",
        f"- compute_score agreement: {v['compute_score_agreement']:.4f} of {v['scored']} answers, the family's score "
        "equal to the user's function called directly (verl's GSM8K scorer behind verl's custom-function "
        "signature, sync with a float and async with a dict)",
        f"- first disagreements: {v['disagreements'] or 'none'}",
        f"- config keys converted by `--from-verl` (verl's ppo_trainer.yaml and its GRPO example's overrides): "
        f"{v['config_keys_converted']}",
        "",
        *rows,
        "",
    ]


def render_trackio(t: dict) -> list[str]:
    return [
        *_head(f"## trackio (trackio {t['package_version']}, local)", t),
        f"- logged: {t['logged']} of {t['values']} numbers of metrics.jsonl ({t['metric_rows']} rows) read back "
        f"equal from trackio's own storage; {t['sample_tables']} samples tables",
        "",
    ]


def render_openreward(o: dict) -> list[str]:
    rows = [
        "| environment | tasks (train / held out) | turns compared | equal to the SDK's session | first disagreements |"
    ]
    rows.append("|---|---|---|---|---|")
    for label, m in o["modes"].items():
        rows.append(
            f"| {label} | {m['tasks']['train']} / {m['tasks']['heldout']} | {m['turns']} | {m['equal']} | "
            f"{m['disagreements'] or 'none'} |"
        )
    return [
        *_head(f"## OpenReward (openreward {o['package_version']}, the SDK's own Server on 127.0.0.1)", o),
        f"- loaded: {o['loaded']} of {o['tried']} environments",
        f"- turn agreement: {o['turn_agreement']:.4f} of {o['turns_compared']} turns, the family's tool outputs, "
        "reward so far and end of episode equal to the SDK client's own session making the same calls (a refused "
        "call compared as refused)",
        f"- trained a few steps: {', '.join(o['trained']) or 'none'}",
        "",
        *rows,
        "",
        *_train_table(o["train"], "run"),
        "",
    ]


def render(report: dict) -> str:
    lines = [
        "# Ecosystem task families",
        "",
        "Generated by `benchmarks/ecosystem.py`; numbers come from its runs (docs/results/ecosystem.json), each part "
        "with the command and machine that produced it.",
        "",
        *render_reasoning_gym(report),
    ]
    draws = (("verifiers", render_verifiers), ("openenv", render_openenv), render_part(tools_part, "tools"))
    draws += (("verl", render_verl), ("trackio", render_trackio), ("openreward", render_openreward))
    draws += (render_part(xtok_part, "cross_tokenizer"), render_part(drift_part, "tool_drift"))
    for part, draw in draws:
        if part in report:
            lines += draw(report[part])
    return "\n".join(lines)


def _earlier() -> dict:
    """The report an earlier run wrote; a report from before each part recorded its command takes it from
    the line the script wrote at the top of the .md."""
    path = OUT / "ecosystem.json"
    if not path.exists():
        return {}
    old = json.loads(path.read_text())
    if "commands" not in old and "reasoning_gym" in old:
        md = (OUT / "ecosystem.md").read_text()
        old["commands"] = {"reasoning_gym": md.split("Generated by `", 1)[1].split("`", 1)[0]}
    return old


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default=",".join(PARTS), help=f"comma-separated parts to run: {', '.join(PARTS)}")
    p.add_argument("--train-tasks", type=int, default=10)
    p.add_argument("--heldout-tasks", type=int, default=3)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--verl", help="a volcengine/verl checkout or git directory (the verl part reads its GSM8K scorer)")
    x = p.add_argument_group("cross_tokenizer")
    x.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    x.add_argument("--opd-steps", type=int, default=150, help="distillation steps of each student arm")
    x.add_argument("--opd-lr", type=float, default=3e-4)
    x.add_argument("--teacher-pass", type=float, default=0.6, help="teachers' warm starts stop at this pass@1")
    x.add_argument("--student-pass", type=float, default=0.2, help="students' warm starts stop at this pass@1")
    x.add_argument("--warm-steps", type=int, default=4000, help="most warm-start steps")
    x.add_argument("--margin", type=float, default=5.0, help="points cross-tokenizer OPD may trail by")
    x.add_argument("--runs", default="runs/ecosystem_xtok", help="where the cross_tokenizer runs go (reused)")
    p.add_argument("--drift-episodes", type=int, default=24, help="tool_drift: SmolLM2's tool episodes")
    args = p.parse_args(argv)
    only = [x for x in args.only.split(",") if x]
    if not only or any(x not in PARTS for x in only):
        p.error(f"--only {args.only!r}: give parts among {', '.join(PARTS)}")
    command = "python benchmarks/ecosystem.py" + "".join(f" {a}" for a in (argv or sys.argv[1:]))
    import importlib.metadata

    report = _earlier()
    if "reasoning_gym" in only:
        report.update(machine=machine(), package_version=importlib.metadata.version("reasoning-gym"))
        rng = random.Random(0)
        names = generator_names()
        gens = {}
        for n in names:
            gens[n] = check_generator(n, args.train_tasks, args.heldout_tasks, rng)
            print(n, gens[n].get("equal"), "/", gens[n].get("answers"), gens[n].get("error", ""), flush=True)
        report["generators"] = gens
        report["train"] = [train_run(label, name, args.steps) for label, name in TRAIN_RUNS.items()]
        loaded = [g for g in gens.values() if g["loaded"]]
        answers = sum(g["answers"] for g in loaded)
        report["reasoning_gym"] = {
            "generators_loaded": len(loaded),
            "generators_total": len(names),
            "score_agreement": sum(g["equal"] for g in loaded) / answers if answers else 0.0,
            "answers_scored": answers,
            "full_marks": sum(g["full_marks"] for g in loaded),
            "heldout_overlap": sum(g["heldout_overlap"] for g in loaded),
            "trained": [r["generator"] for r in report["train"] if r["ok"]],
        }
        report.setdefault("commands", {})["reasoning_gym"] = command
        print(json.dumps(report["reasoning_gym"], indent=1))
    elif "reasoning_gym" not in report:
        p.error("there is no earlier reasoning_gym part to keep; run it too (leave out --only)")
    for part, check in (("verifiers", check_verifiers), ("openenv", check_openenv)):
        if part in only:
            m = machine()
            out = check(args.steps)
            report[part] = {**out.pop("summary"), **out, "command": command, "machine": m}
            print(part, json.dumps({k: report[part][k] for k in ("loaded", "tried", "trained", "score_agreement")}))
    checks = {"verl": lambda steps: check_verl(args.verl), "trackio": check_trackio}
    checks["openreward"] = check_openreward
    for part, check in checks.items():
        if part in only:
            m = machine()
            out = check(args.steps)
            report[part] = {**out.pop("summary"), **out, "command": command, "machine": m}
            print(part, json.dumps({k: v for k, v in report[part].items() if k in KEYS[part]}))
    if "tools" in only:
        m = machine()
        report["tools"] = {**tools_part.measure(), "command": command, "machine": m}
        print("tools", json.dumps({k: report["tools"][k] for k in ("calls_parsed", "malformed_handled")}))
    if "cross_tokenizer" in only:
        m = machine()
        xa = argparse.Namespace(
            seeds=args.seeds,
            steps=args.opd_steps,
            lr=args.opd_lr,
            teacher_pass=args.teacher_pass,
            student_pass=args.student_pass,
            warm_steps=args.warm_steps,
            margin=args.margin,
            out=args.runs,
        )
        report["cross_tokenizer"] = {**xtok_part.measure(xa), "command": command, "machine": m}
        print("cross_tokenizer", json.dumps(report["cross_tokenizer"]["opd_points_vs_same_tokenizer"]))
    if "tool_drift" in only:
        m = machine()
        report["tool_drift"] = {**drift_part.measure(args.drift_episodes), "command": command, "machine": m}
        print("tool_drift", json.dumps({k: report["tool_drift"][k] for k in ("episodes", "realigned", "forked")}))
    # parts this run did not measure are taken as the file holds them now: a run of another part that
    # ended meanwhile keeps its numbers
    kept = _earlier()
    mine = [k for k in RG_KEYS if "reasoning_gym" in only] + [p for p in PARTS[1:] if p in only]
    commands = {**kept.get("commands", {}), **({"reasoning_gym": command} if "reasoning_gym" in only else {})}
    report = {**kept, **{k: report[k] for k in mine}, "commands": commands}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "ecosystem.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    (OUT / "ecosystem.md").write_text(render(report))


if __name__ == "__main__":
    main()
