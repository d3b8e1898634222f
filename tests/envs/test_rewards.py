"""Rewards like TRL's: several functions with weights, one call per batch of answers, async functions,
and the math verifier."""

import asyncio
import json

import pytest

from tempering.envs.dataset import DatasetFamily
from tempering.envs.rewards import boxed_format, final_answer, math_answer, resolve_rewards
from tempering.errors import UserError
from tempering.recipes.runner import trainer

pytest.importorskip("math_verify")


@pytest.mark.parametrize(
    ("completion", "answer", "expected"),
    [
        ("so she has \\boxed{16} apples", "16", 1.0),
        ("I think 5, no wait: \\boxed{6}. Check: 3 + 3 = 6", "6", 1.0),  # the boxed answer wins
        ("First 12 - 5 = 7, then 7 + 9 = 16", "16", 1.0),  # the last number
        ("7 + 9 = 16\n#### 16", "16", 1.0),
        ("#### 16\nbecause 12 - 5 = 7 and 20", "16", 1.0),  # the #### answer, not the last number
        ("it costs 1,234 dollars", "1234", 1.0),
        ("the answer is \\boxed{\\frac{1}{2}}", "0.5", 1.0),  # symbolic = numeric
        ("x = 2/4", "\\frac{1}{2}", 1.0),
        ("\\boxed{15.0}", "She runs 2.5 km a day: 2.5 * 6 = 15.\n#### 15", 1.0),  # GSM8K's answer form
        ("\\boxed{17}", "16", 0.0),
        ("no idea", "16", 0.0),
    ],
)
def test_math_answer(completion, answer, expected):
    assert math_answer(["q"], [completion], answer=[answer]) == [expected]


def test_final_answer_and_format_reward():
    assert final_answer("work... #### 42 \nmore 7") == " 42 "
    assert final_answer("just 42") == "just 42"
    assert boxed_format(["q", "q"], ["\\boxed{3}", "3"]) == [1.0, 0.0]


def test_several_reward_functions_are_named_and_weighted():
    def style(prompts, completions, **_):
        return [0.5] * len(completions)

    rs = resolve_rewards(["math", style, style], [1.0, 0.2, 0.1])
    assert [(r.name, r.weight) for r in rs] == [("math", 1.0), ("style", 0.2), ("style_2", 0.1)]
    with pytest.raises(UserError, match="2 values for 3 reward functions"):
        resolve_rewards(["math", style, style], [1.0, 0.2])
    with pytest.raises(UserError, match="unknown reward 'mathh'"):
        resolve_rewards(["mathh"])


def _family(tmp_path, reward, **kw):
    path = tmp_path / "d.jsonl"
    path.write_text(
        "".join(json.dumps({"prompt": f"{i}+{i}=", "answer": str(2 * i), "topic": f"t{i}"}) + "\n" for i in range(8))
    )
    return DatasetFamily(str(path), reward=reward, heldout_share=0.0001, **kw)


def _verify(family, answers):
    """Every answer's step started at once, as the rollout engine does for one turn of a batch."""
    tasks = family.tasks("train", len(answers))

    async def go():
        return await asyncio.gather(*(family.make_env(t).step(a) for t, a in zip(tasks, answers)))

    return tasks, asyncio.run(go())


def test_one_call_per_batch_with_lists_and_each_value_kept(tmp_path):
    calls = []

    def counted(prompts, completions, answer, topic, **_):
        calls.append((list(prompts), list(completions), list(topic)))
        return [float(c.strip() == a) for c, a in zip(completions, answer)]

    async def shorter(prompts, completions, **_):  # an async reward function
        await asyncio.sleep(0)
        return [1.0 if len(c) < 3 else None for c in completions]  # None: not judged

    fam = _family(tmp_path, [counted, shorter], reward_weights=[1.0, 0.5], success_threshold=1.5)
    tasks, results = _verify(fam, ["0", "2", "wrong", "6 "])
    assert len(calls) == 1 and len(calls[0][1]) == 4  # one batched call
    assert calls[0][0] == [t.prompt for t in tasks] and calls[0][2] == [t.meta["topic"] for t in tasks]
    got = [(r.score, r.success, r.info["rewards"]) for r in results]
    right = [c.strip() == t.answer for c, t in zip(["0", "2", "wrong", "6 "], tasks)]
    for (score, ok, parts), c, good in zip(got, ["0", "2", "wrong", "6 "], right):
        short = len(c) < 3
        assert parts == {"counted": float(good), **({"shorter": 1.0} if short else {})}
        assert score == float(good) + 0.5 * short and ok == (good and short)


def test_a_reward_function_that_raises_fails_every_waiting_answer(tmp_path):
    def broken(prompts, completions, **_):
        raise ZeroDivisionError("oops")

    fam = _family(tmp_path, broken)
    with pytest.raises(UserError, match=r"broken raised ZeroDivisionError: oops"):
        _verify(fam, ["1", "2"])
    with pytest.raises(UserError, match="returned 1 values for 2 completions"):
        _verify(_family(tmp_path, lambda p, c, **_: [1.0]), ["1", "2"])


def test_an_empty_dataset_names_its_file(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(UserError, match=r"empty\.jsonl"):
        DatasetFamily(str(tmp_path / "empty.jsonl"))


def test_each_reward_function_is_logged_on_its_own(tmp_path):

    def short(prompts, completions, **_):
        return [float(len(c) <= 2) for c in completions]

    cfg = {
        "model": {"name": "tiny-xs"},
        "task": {"heldout_size": 2},
        "rollout": {"group_size": 2, "prompts_per_step": 2, "max_new_tokens": 3},
        "run": {
            "steps": 1,
            "eval_every": 0,
            "eval_k": 1,
            "progress": False,
            "tensorboard": False,
            "out_dir": str(tmp_path / "run"),
        },
    }
    fam = _family(tmp_path, ["exact", short], reward_weights=[1.0, 0.25])
    m = asyncio.run(trainer("train", cfg, family=fam).step()).metrics
    assert {"reward/exact", "reward/short"} <= set(m)
    assert m["reward"] == pytest.approx(m["reward/exact"] + 0.25 * m["reward/short"])
