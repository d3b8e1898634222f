"""The terminal environment: commands run in the sandbox with state carried over, the tests decide the
reward; the oracle's commands solve a bundle and doing nothing does not."""

import asyncio

import pytest

from tempering.envs.terminal import TerminalEnv, TerminalFamily, bundle_task, parse_command
from tempering.synth.seeds import load_seeds


@pytest.fixture(scope="module")
def sandbox():
    from tempering.sandbox import Sandbox

    return Sandbox(backend="bwrap" if "bwrap" in Sandbox.available_backends() else "subprocess", concurrency=2)


@pytest.fixture(scope="module")
def bundle():
    return load_seeds("builtin")[0].bundle  # ledger, depth 1: answer.txt from orders.csv


def play(env, answers):
    async def go():
        return [await env.step(a) for a in answers]

    return asyncio.run(go())


def test_parse_command():
    assert parse_command("I will list.\n```bash\nls -la\n```\nthen more") == "ls -la"
    assert parse_command("  cat x.txt ") == "cat x.txt"
    assert parse_command("```\n\n```") is None


def test_state_carries_over_and_output_comes_back(sandbox, bundle):
    env = TerminalEnv(bundle_task(bundle), sandbox, command_timeout_s=1)
    assert "submit" in env.reset() and "orders.csv" in env.reset()
    r1, r2, r3, r4 = play(
        env,
        [
            "```bash\nmkdir work && cd work && echo hi > note.txt && chmod +x note.txt\n```",
            "ls -l work; cat work/note.txt; head -1 orders.csv",
            "sleep 30",
            "false",
        ],
    )
    assert r1.feedback == "[exit 0]" and not r1.done
    assert "-rwx" in r2.feedback and "hi" in r2.feedback and "id,customer,total" in r2.feedback
    assert r3.status == "timeout" and "timed out" in r3.feedback
    assert r4.feedback == "[exit 1]"


def test_oracle_commands_solve_the_task_and_doing_nothing_fails(sandbox, bundle):
    solve = bundle.text("solution/solve.sh")
    env = TerminalEnv(bundle_task(bundle), sandbox)
    _, final = play(env, [f"```bash\n{solve}\n```", "submit"])
    assert final.done and final.success and final.score == 1.0 and final.status == "correct"
    idle = TerminalEnv(bundle_task(bundle), sandbox)
    (final,) = play(idle, ["submit"])
    assert final.done and not final.success and final.score == 0.0 and final.status == "incorrect"


def test_wrong_answer_and_command_limit(sandbox, bundle):
    env = TerminalEnv(bundle_task(bundle), sandbox, max_commands=2)
    r1, r2 = play(env, ["echo 12.5 > answer.txt", "cat answer.txt"])
    assert not r1.done and r2.done and r2.score == 0.0 and "command limit" in r2.feedback


def test_family_splits_are_disjoint():
    fam = TerminalFamily("builtin", heldout_share=0.3)
    train = {t.id for t in fam.tasks("train", 3)}
    held = {t.id for t in fam.tasks("heldout", 1)}
    assert train and held and not train & held
    with pytest.raises(Exception, match="only"):
        fam.tasks("train", 50)
