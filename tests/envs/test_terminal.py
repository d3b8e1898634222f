"""The terminal environment on bundles in Harbor's layout: commands run at /app in the sandbox with state
carried over, the tests at /tests decide the reward; multi-step tasks, reward.json, families that leave
out what cannot run here."""

import asyncio

import pytest

from tempering.envs.terminal import SAMPLES, TerminalEnv, TerminalFamily, bundle_task, parse_command, read_bundle
from tempering.envs.terminal.workspace import read_rewards
from tempering.sandbox import Sandbox

ISOLATED = [b for b in ("bwrap", "unshare") if b in Sandbox.available_backends()]
pytestmark = pytest.mark.skipif(not ISOLATED, reason="Harbor's paths need an isolating sandbox backend")


@pytest.fixture(scope="module")
def sandbox():
    return Sandbox(backend=ISOLATED[0], concurrency=2)


def sample(name):
    return read_bundle(SAMPLES / name)


def play(env, answers):
    async def go():
        return [await env.step(a) for a in answers]

    return asyncio.run(go())


def test_parse_command():
    assert parse_command("I will list.\n```bash\nls -la\n```\nthen more") == "ls -la"
    assert parse_command("  cat x.txt ") == "cat x.txt"
    assert parse_command("```\n\n```") is None


def test_commands_run_at_app_and_state_carries_over(sandbox):
    env = TerminalEnv(bundle_task(sample("csv-revenue")), sandbox, command_timeout_s=1)
    assert "submit" in env.reset() and "/app/sales.csv" in env.reset()
    r1, r2, r3, r4, r5 = play(
        env,
        [
            "```bash\nmkdir work && cd work && echo hi > note.txt && chmod +x note.txt\n```",
            "pwd; ls -l work; cat /app/work/note.txt; head -1 sales.csv",
            "ls /tests /solution /logs/verifier 2>&1 | head -3",
            "sleep 30",
            "false",
        ],
    )
    assert r1.feedback == "[exit 0]" and not r1.done
    assert r2.feedback.startswith("/app\n") and "-rwx" in r2.feedback and "hi" in r2.feedback
    assert "region,product,units,unit_price" in r2.feedback
    assert r3.feedback.count("No such file") == 3  # the agent never sees the tests, the oracle or the reward
    assert r4.status == "timeout" and "timed out" in r4.feedback
    assert r5.feedback == "[exit 1]"


@pytest.mark.parametrize("name", ["csv-revenue", "legacy-config", "tb1-word-count"])
def test_oracle_commands_solve_the_task_and_doing_nothing_fails(sandbox, name):
    bundle = sample(name)
    solve = bundle.text("solution/solve.sh")
    _, final = play(TerminalEnv(bundle_task(bundle), sandbox), [f"```bash\n{solve}\n```", "submit"])
    assert final.done and final.success and final.score == 1.0 and final.status == "correct"
    (idle,) = play(TerminalEnv(bundle_task(bundle), sandbox), ["submit"])
    assert idle.done and not idle.success and idle.score == 0.0 and idle.status == "incorrect"


def test_planted_reward_and_tests_do_not_count(sandbox):
    env = TerminalEnv(bundle_task(sample("csv-revenue")), sandbox)
    planted, final = play(env, ["mkdir -p /logs/verifier /tests; echo 1 > /logs/verifier/reward.txt", "submit"])
    assert planted.feedback.endswith("[exit 1]")  # the sandbox's root is read-only outside /app
    assert final.score == 0.0


def test_reward_json_names_several_rewards(sandbox):
    env = TerminalEnv(bundle_task(sample("log-levels")), sandbox)
    write = """python3 -c 'import json; json.dump({"counts": {"DEBUG": 1, "INFO": 3, "WARN": 1, "ERROR": 3}, "worst_file": "worker.log"}, open("report.json", "w"))'"""
    _, final = play(env, [write, "submit"])
    assert final.done and final.score == 0.0
    assert final.info["rewards"] == [{"reward": 0.0, "counts": 1.0, "worst_file": 0.0}]


def test_multi_step_task_goes_step_by_step(sandbox):
    bundle = sample("notes-steps")
    s1, s2 = (bundle.text(f"steps/{n}/solution/solve.sh") for n in ("01-collect", "02-sort"))
    env = TerminalEnv(bundle_task(bundle), sandbox)
    assert "/app/inbox/" in env.reset()
    r = play(env, [s1, "submit", s2, "submit"])
    assert r[1].status == "next_step" and not r[1].done and "/app/sorted.txt" in r[1].feedback
    assert r[3].done and r[3].score == 1.0 and r[3].info["steps_run"] == 2
    # step 1 has min_reward = 1: missing it ends the episode; the mean is over the steps that ran
    (stop,) = play(TerminalEnv(bundle_task(bundle), sandbox), ["submit"])
    assert stop.done and stop.score == 0.0 and stop.info["steps_run"] == 1
    # step 2 failed after step 1 passed: mean of 1 and 0
    half = play(TerminalEnv(bundle_task(bundle), sandbox), [s1, "submit", "submit"])[-1]
    assert half.done and half.score == 0.5


def test_command_limit_runs_the_tests(sandbox):
    env = TerminalEnv(bundle_task(sample("tb1-word-count")), sandbox, max_commands=2)
    r1, r2 = play(env, ["echo 8 > count.txt", "cat count.txt"])
    assert not r1.done and r2.done and r2.score == 0.0 and "command limit" in r2.feedback


def test_family_splits_are_disjoint():
    fam = TerminalFamily("builtin", heldout_share=0.4)
    train = {t.id for t in fam.tasks("train", 4)}
    held = {t.id for t in fam.tasks("heldout", 1)}
    assert len(train) == 4 and len(held) == 1 and not train & held
    with pytest.raises(Exception, match="only"):
        fam.tasks("train", 50)


def test_family_leaves_out_what_cannot_run_here_and_says_why(tmp_path):
    import shutil

    shutil.copytree(SAMPLES / "csv-revenue", tmp_path / "good")
    shutil.copytree(SAMPLES / "csv-revenue", tmp_path / "apt")
    apt = "FROM ubuntu:24.04\nRUN apt-get install -y tempering-absent-tool\nWORKDIR /app\n"
    (tmp_path / "apt" / "environment" / "Dockerfile").write_text(apt)
    shutil.copytree(SAMPLES / "csv-revenue", tmp_path / "broken")
    (tmp_path / "broken" / "task.toml").write_text("[environment]\nmemory = '4G'\nmemory_mb = 2048\n")
    with pytest.warns(UserWarning, match="left out 2 bundle"):
        fam = TerminalFamily(str(tmp_path))
    assert [b.name for b in fam.bundles] == ["good"]
    assert "needs Docker: Dockerfile line 2: `RUN apt-get install -y tempering-absent-tool`" in fam.skipped["apt"]
    assert fam.skipped["broken"].startswith("invalid task.toml") and "conflicting memory" in fam.skipped["broken"]


def test_rewards_are_read_as_harbor_reads_them():
    assert read_rewards(b"1\n", None).values == {"reward": 1.0}
    assert read_rewards(None, b'{"reward": 0, "style": 1}').score == 0.0
    assert read_rewards(None, b'{"style": 1, "speed": 0}').score == 0.5  # no `reward`: the mean
    assert "not a number" in read_rewards(b"pass", None).error
    assert "one object" in read_rewards(None, b"[1]").error
    assert "wrote no reward" in read_rewards(None, None).error


@pytest.mark.parametrize(
    "txt, js",
    [(b"0\n", b'{"reward": 1}'), (b"1", b'{"reward": 0.0, "style": 1}'), (b"pass", b'{"reward": 1}')],
)
def test_two_reward_files_that_disagree_give_no_reward(txt, js):
    """Any process of the tests' job can write either file: one written beside test.sh's never decides."""
    rewards = read_rewards(txt, js)
    assert rewards.values is None and "disagree" in rewards.error
    assert read_rewards(b"1", b'{"reward": 1.0, "style": 0}').values == {"reward": 1.0, "style": 0.0}


def test_a_reward_txt_beside_metrics_only_is_no_reward():
    """reward.json's metrics alone score; a reward.txt beside them (another process's, maybe) never names the
    reward. Published tasks that write both files write the same reward in each (`echo "1.0" >
    reward.txt; printf '{"reward":1.0}\\n' > reward.json`; a reward.txt copied from reward.json's `reward`)."""
    assert read_rewards(None, b'{"a": 1, "b": "x", "c": true}').values == {"a": 1.0}
    for txt in (b"0.5", b"1", b"0"):
        rewards = read_rewards(txt, b'{"a": 1, "b": "x", "c": true}')
        assert rewards.values is None and "without `reward`" in rewards.error
    assert read_rewards(b"1.0\n", b'{"reward":1.0}\n').values == {"reward": 1.0}
    assert read_rewards(b"0.0\n", b'{"reward":0.0}\n').values == {"reward": 0.0}
    assert read_rewards(b"0.75\n", b'{"reward": 0.75, "files_matched": 3}').values == {
        "reward": 0.75,
        "files_matched": 3.0,
    }


@pytest.mark.parametrize(
    "txt, js, shown",
    [
        (b"40.0\n", None, "reward=40.0"),
        (b"-0.5", None, "reward=-0.5"),
        (b"nan", None, "reward=nan"),
        (b"inf", None, "reward=inf"),
        (None, b'{"reward": 1.5}', "reward=1.5"),
        (None, b'{"reward": NaN}', "reward=nan"),
        (None, b'{"style": 3, "speed": -1}', "style=3.0, speed=-1.0"),  # the mean would be 1
    ],
)
def test_a_reward_outside_zero_one_is_no_reward(txt, js, shown):
    """An uncapped partial credit is the candidate's failure, never a full pass after clipping."""
    rewards = read_rewards(txt, js)
    assert rewards.values is None and rewards.score is None and not rewards.host_fault
    assert shown in rewards.error and "outside [0, 1]" in rewards.error
    assert read_rewards(None, b'{"reward": 1, "runtime_s": 12.5}').score == 1.0  # only what is scored is capped
