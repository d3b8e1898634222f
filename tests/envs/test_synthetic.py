import asyncio
import json

import pytest

from tempering.envs.arithmetic import ArithmeticFamily, digit_accuracy, digit_hint
from tempering.envs.chain import ChainFamily
from tempering.envs.dataset import DatasetFamily
from tempering.envs.registry import make_family
from tempering.envs.rewards import call_reward, numeric_match, regex_match, resolve_reward
from tempering.envs.strings import StringsFamily
from tempering.errors import UserError


def _step(env, text):
    return asyncio.run(env.step(text))


def test_splits_are_disjoint_and_deterministic():
    fam = ArithmeticFamily(min_value=0, max_value=99)
    train = {t.id for t in fam.tasks("train", 2000, seed=0)}
    held = {t.id for t in fam.tasks("heldout", 300, seed=1)}
    assert not train & held
    assert [t.id for t in fam.tasks("heldout", 50, seed=4)] == [t.id for t in fam.tasks("heldout", 50, seed=4)]


def test_too_many_tasks_is_a_clear_error():
    with pytest.raises(UserError, match="distinct"):
        ArithmeticFamily(min_value=0, max_value=3).tasks("heldout", 50)


def test_arithmetic_verifier_and_feedback():
    fam = ArithmeticFamily(partial_credit=True)
    task = fam.tasks("train", 1)[0]
    env = fam.make_env(task)
    ok = _step(env, task.answer + "\nignored")
    assert ok.success and ok.score == 1.0 and ok.done
    wrong = "9" * len(task.answer)
    r = _step(env, wrong)
    assert not r.success and r.status == "incorrect" and len(r.feedback) == len(task.answer)
    assert _step(env, "abc").status == "parse_error"
    assert digit_accuracy("579", "589") == pytest.approx(2 / 3)
    assert digit_hint("579", "589") == "5?9"
    assert digit_hint("89", "589") == "?89"


def test_strings_family():
    fam = StringsFamily(ops=("rev",))
    t = fam.tasks("train", 1)[0]
    text = t.prompt[len("rev:") : -1]
    assert t.answer == text[::-1]
    assert _step(fam.make_env(t), t.answer).success
    with pytest.raises(UserError, match="unknown ops"):
        StringsFamily(ops=("explode",))


def test_chain_family_worked_answers_are_long_and_only_the_result_counts():
    fam = make_family("chain", min_terms=3, max_terms=10)
    t = ChainFamily(min_terms=3, max_terms=3).tasks("train", 1)[0]
    a, b, c = map(int, t.prompt[:-1].split("+"))
    assert t.answer == f"{a}+{b}={a + b};{a + b}+{c}={a + b + c}" and t.difficulty == 3
    env = fam.make_env(t)
    assert _step(env, t.answer).success
    assert _step(env, f"1+1=5;{a + b + c}").status == "parse_error"  # the result follows the last '='
    assert _step(env, f"x={a + b + c}\nignored").success  # the steps are not checked, the result is
    assert _step(env, f"{a}+{b}={a + b + c + 1}").status == "incorrect"
    longest = max(len(x.answer) for x in fam.tasks("train", 500))
    assert 90 <= longest <= 120  # up to ~110 answer tokens at the defaults
    partial = ChainFamily(min_terms=3, max_terms=3, partial_credit=True)
    env = partial.make_env(t)
    half = _step(env, f"{a}+{b}={a + b};{a + b}+{c}={a + b + c + 1}")
    assert half.score == 0.5 and not half.success  # one of two steps right
    assert _step(env, f"{a}+{b}={a + b};1+1=2;2+2=5").score == pytest.approx(1 / 3)  # extra steps count against
    assert _step(env, t.answer).score == 1.0
    with pytest.raises(UserError, match="min_terms"):
        ChainFamily(min_terms=1)


def test_dataset_family_with_a_trl_style_reward(tmp_path):
    rows = [{"prompt": f"q{i}", "answer": str(i), "topic": "x"} for i in range(30)]
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    seen = {}

    def reward(prompts, completions, answer, topic, **_):
        seen["topic"] = topic
        return [float(c == a) for c, a in zip(completions, answer)]

    fam = make_family("dataset", train=str(path), reward=reward, heldout_share=0.3)
    assert fam.split["heldout"] and len(fam.split["train"]) + len(fam.split["heldout"]) == 30
    t = fam.tasks("train", 1)[0]
    assert _step(fam.make_env(t), t.answer).success and seen["topic"] == ["x"]


def test_dataset_errors_name_the_problem(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "a"}\n{"question": "b"}\n')
    with pytest.raises(UserError, match="row 1 has no 'prompt' column"):
        DatasetFamily(str(bad))
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"prompt": "a"}\n{oops\n')
    with pytest.raises(UserError, match="broken.jsonl:2"):
        DatasetFamily(str(broken))


def test_reward_that_raises_names_the_function_and_sample():
    def fragile(prompts, completions, **_):
        raise KeyError("boom")

    with pytest.raises(UserError, match=r"fragile raised KeyError.*'p1'.*'c1'"):
        call_reward(fragile, ["p1"], ["c1"], {})


def test_builtin_rewards():
    assert numeric_match([""], ["so it is 1,234.0"], answer=["1234"]) == [1.0]
    assert numeric_match([""], ["no number"], answer=["1"]) == [0.0]
    assert regex_match([""], ["abc123"], pattern=[r"[a-c]+\d+"]) == [1.0]
    assert resolve_reward("exact")([""], [" 5 "], answer=["5"]) == [1.0]
    with pytest.raises(UserError):
        resolve_reward("nope")


def test_dataset_family_from_hf_datasets(tmp_path):
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_list([{"prompt": f"{i}+1=", "answer": str(i + 1)} for i in range(20)])
    fam = DatasetFamily(ds, reward="exact", heldout_share=0.25)
    ds.save_to_disk(str(tmp_path / "saved"))
    fam2 = DatasetFamily(str(tmp_path / "saved"), reward="numeric", heldout_share=0.25)
    assert [t.prompt for t in fam.split["heldout"]] == [t.prompt for t in fam2.split["heldout"]]
    t = fam2.tasks("train", 1)[0]
    assert _step(fam2.make_env(t), f"it is {t.answer}").success


def test_arithmetic_asked_in_words_reads_the_last_number_of_the_first_line():
    fam = ArithmeticFamily(min_value=1, max_value=9, prompt_template="What is {a} {op} {b}?", read="last_number")
    task = fam.tasks("train", 1, seed=0)[0]
    a, b = task.id.removeprefix("arith:").split("+")
    assert task.prompt == f"What is {a} + {b}?"
    right = f"{a} + {b} = {task.answer}"
    assert fam.check(task, right)[1] and not fam.check(task, f"{right}0")[1]
    assert fam.check(task, "I do not know")[3] == "parse_error"
    # the held-out split does not depend on the wording
    plain = ArithmeticFamily(min_value=1, max_value=9)
    assert [t.id for t in plain.tasks("heldout", 5, seed=1)] == [t.id for t in fam.tasks("heldout", 5, seed=1)]
    with pytest.raises(UserError, match="prompt_template"):
        ArithmeticFamily(prompt_template="What is {x}?")
