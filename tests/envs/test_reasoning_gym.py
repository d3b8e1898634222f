"""task.family=reasoning_gym against the reasoning-gym package itself: its entries, its scorers."""

import asyncio
import importlib.util
import json
import random
import subprocess
import sys

import pytest

if importlib.util.find_spec("reasoning_gym") is None:  # found, not imported: collection stays cheap
    pytest.skip("reasoning-gym is not installed", allow_module_level=True)

from tempering.envs.reasoning_gym import ReasoningGymFamily, extract, generator_names
from tempering.envs.registry import make_family
from tempering.errors import UserError

GENERATORS = ["basic_arithmetic", "letter_counting", "word_sorting", "countdown", "propositional_logic"]
"""Exact answers, the base class's partial credit (letter_counting, word_sorting: the oracle inside a
longer answer scores len(oracle) / len(answer)), expressions scored by value (countdown) and questions
with many right answers and no oracle (propositional_logic)."""
COMPOSITE = {"chain_sum": 2.0, "spell_backward": 1.0}


def _score(family, task, completion):
    return asyncio.run(family.make_env(task).step(completion))


def _right(entry):
    """The entry's answer; for questions with many right answers, the package's example of one."""
    meta = entry["metadata"]
    return entry["answer"] if entry["answer"] is not None else meta.get("example_answer", meta.get("possible_answer"))


def _candidates(tasks, rng):
    """Per task: answers to score, the right one from the entry and wrong ones made from it or other entries."""
    right = [_right(t.meta["entry"]) for t in tasks]
    for t, a in zip(tasks, right):
        made = [a, rng.choice(right), f"{a} {a}", f"x {a}", a[:-1] or "0", a[::-1], ""]
        yield t, [c.strip() for c in made]  # the tag's text is read stripped


@pytest.mark.parametrize("name", [*GENERATORS, "composite"])
def test_scores_equal_the_packages_score_answer(name):
    fam = make_family("reasoning_gym", name=COMPOSITE if name == "composite" else name)
    tasks = fam.tasks("train", 40, seed=3)
    rng = random.Random(0)
    n, partial, full = 0, 0, 0
    for t, answers in _candidates(tasks, rng):
        entry = t.meta["entry"]
        for a in answers:
            res = _score(fam, t, f"Let me think.\n<answer>{a}</answer>")
            assert res.score == fam.scorer.score_answer(a, entry), (t.id, a)
            assert res.success == (res.score >= 1.0)
            n += 1
            partial += 0 < res.score < 1
            full += res.score == 1.0
        res = _score(fam, t, "no tags here")  # no answer: what the package gives None
        assert res.score == fam.scorer.score_answer(None, entry) and res.status == "parse_error"
        n += 1
    assert n >= 200 and full >= 40  # every reference answer is among them
    if name in ("letter_counting", "word_sorting"):
        assert partial > 0


def test_composite_draws_from_each_generator_and_scores_with_its_own():
    fam = make_family("reasoning_gym", name=COMPOSITE, config={"chain_sum": {"min_terms": 2, "max_terms": 2}})
    tasks = fam.tasks("train", 60)
    assert {t.meta["generator"] for t in tasks} == set(COMPOSITE)
    assert all(_score(fam, t, t.answer).success for t in tasks)


def test_extraction_reads_the_last_complete_tag():
    from reasoning_gym.utils import extract_answer

    assert extract("<answer>1</answer> then <answer> 2 </answer>") == "2"
    assert extract("<answer>\nmulti\nline\n</answer>") == "multi\nline"
    assert extract("<answer>1</answer> <answer>unclosed") == "1"
    assert extract("no tags") is None
    assert extract("<answer></answer>") == ""
    for s in ["a <answer>x</answer>", "<answer>  y </answer>", "<answer>z"]:
        assert extract(s) == extract_answer(s)


def test_threshold_sets_success_and_the_score_is_kept():
    strict = make_family("reasoning_gym", name="letter_counting")
    lax = make_family("reasoning_gym", name="letter_counting", success_threshold=0.3)
    t = strict.tasks("train", 1)[0]
    a = t.meta["entry"]["answer"]
    r1, r2 = _score(strict, t, f"<answer>{a} x</answer>"), _score(lax, t, f"<answer>{a} x</answer>")
    assert 0 < r1.score < 1 and r1.score == r2.score
    assert not r1.success and r1.status == "incorrect" and "needs 1" in r1.feedback
    assert r2.success and r2.done


@pytest.mark.parametrize("name", ["basic_arithmetic", "arc_1d", COMPOSITE])
def test_heldout_questions_never_appear_in_train(name):
    fam = make_family("reasoning_gym", name=name)
    held = {t.meta["entry"]["question"] for t in fam.tasks("heldout", 30, seed=0)}
    for seed in (0, 1):
        train = {t.meta["entry"]["question"] for t in fam.tasks("train", 200, seed=seed)}
        assert len(train) == 200 and not held & train
    assert fam.package_seed("train", 1) != fam.package_seed("heldout", 0)


def test_bad_arguments_are_user_errors_with_the_way_out():
    with pytest.raises(UserError, match="unknown generator 'basic_arithmetc'; nearest: basic_arithmetic"):
        make_family("reasoning_gym", name="basic_arithmetc")
    with pytest.raises(UserError, match="unknown generator"):
        make_family("reasoning_gym", name={"chain_sum": 1, "spel_backward": 1})
    with pytest.raises(UserError, match="remove them"):
        make_family("reasoning_gym", name="chain_sum", config={"seed": 3})
    with pytest.raises(UserError, match="rejects the config"):
        make_family("reasoning_gym", name="chain_sum", config={"no_such_arg": 3})
    with pytest.raises(UserError, match=r"\{generator: \{arg: value\}\}"):
        make_family("reasoning_gym", name=COMPOSITE, config={"min_terms": 2})
    with pytest.raises(UserError, match="mapping"):
        make_family("reasoning_gym", name="composite")
    with pytest.raises(UserError, match="positive"):
        make_family("reasoning_gym", name={"chain_sum": 0})
    tiny = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}  # about 200 distinct questions
    with pytest.raises(UserError, match="only .* distinct heldout questions"):
        make_family("reasoning_gym", name="chain_sum", config=tiny).tasks("heldout", 100)


def test_a_scorer_that_raises_is_counted_named_and_warned_once(capsys):
    """The package's own prime_factorization scorer raises ValueError on an answer that is no product."""
    from tempering.metrics import reward_parts
    from tempering.types import Episode, Turn

    fam = make_family("reasoning_gym", name="prime_factorization")
    task = fam.tasks("train", 1, seed=0)[0]
    with pytest.raises(ValueError):  # the package's behaviour this test rests on
        fam.scorer.score_answer("((((", task.meta["entry"])
    results = [_score(fam, task, "<answer>((((</answer>") for _ in range(2)]
    res = results[0]
    assert (res.score, res.success, res.status) == (0.0, False, "parse_error")
    cause = res.info["scorer_error"]
    assert cause.startswith("reasoning_gym generator 'prime_factorization': score_answer raised ValueError: ")
    assert "invalid literal" in cause and "((((" in cause
    assert fam.scorer_errors == {("prime_factorization", "ValueError"): 2}
    err = capsys.readouterr().err
    assert err.count("score_answer raised ValueError") == 1 and "scorer_errors" in err  # once per kind
    right = _score(fam, task, f"<answer>{task.meta['entry']['answer']}</answer>")
    assert right.success and "scorer_error" not in right.info

    def episode(r):
        turn = Turn(action_ids=[1], logprobs=[0.0], score=r.score, status=r.status, info=r.info)
        return Episode(task=task, prompt_ids=[1], turns=[turn], prompt=task.prompt)

    assert reward_parts([episode(r) for r in [*results, right]])["scorer_errors"] == 2.0
    assert "scorer_errors" not in reward_parts([episode(right)])


def test_missing_package_says_how_to_install(monkeypatch):
    import tempering.envs.reasoning_gym as rg

    monkeypatch.setitem(sys.modules, "reasoning_gym", None)
    with pytest.raises(UserError, match=r"pip install 'tempering\[ecosystem\]'"):
        rg.generator_names()


def test_every_registered_generator_is_known():
    names = generator_names()
    assert len(names) > 90 and "composite" not in names and set(GENERATORS) <= set(names)
    assert isinstance(ReasoningGymFamily(name=names[0]).scorer, object)


@pytest.mark.slow
def test_train_verb_runs_a_few_steps_with_feedback_turns(tmp_path):
    out = tmp_path / "run"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "tempering.cli",
            "train",
            "model.name=tiny-xs",
            "task.family=reasoning_gym",
            "task.args.name=basic_arithmetic",
            "task.args.success_threshold=1.0",
            "task.train_size=16",
            "task.heldout_size=4",
            "rollout.group_size=2",
            "rollout.prompts_per_step=2",
            "rollout.max_new_tokens=8",
            "rollout.max_turns=2",
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
    )
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in rows if "reward" in x] == [1, 2]
    samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    two = [x for x in samples if len(x["turns"]) == 2]  # turn 1 failed: the verdict's feedback, then turn 2
    assert two and all(x["turns"][0]["feedback"] for x in two)
    assert all(x["task"].startswith("reasoning_gym:basic_arithmetic:") for x in samples)
