"""TRL's dataset formats and reward functions: conversational prompts through the chat template, TRL's
own reward functions unchanged, file-path rewards, time limits and error messages."""

import asyncio
import json
import subprocess
import sys
import time

import pytest

from tempering.envs.dataset import DatasetFamily, heldout_count
from tempering.errors import UserError
from tempering.models.chat import ChatFormat, Conversation
from tempering.recipes.runner import trainer

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
    "{% if not (loop.last and m['role'] == 'assistant') %}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# TRL's documented conversational prompt-only and prompt-completion examples (trl/data_utils.py)
CONVERSATIONAL = [
    {
        "prompt": [{"role": "user", "content": "What color is the sky?"}],
        "completion": [{"role": "assistant", "content": "It is blue."}],
    },
    {
        "prompt": [
            {"role": "system", "content": "You are a terse assistant."},
            {"role": "user", "content": "Where is the sun?"},
        ],
        "completion": [{"role": "assistant", "content": "In the sky."}],
    },
]


def _verify(family, answers, split="train"):
    tasks = family.tasks(split, len(answers))

    async def go():
        return await asyncio.gather(*(family.make_env(t).step(a) for t, a in zip(tasks, answers)))

    return tasks, asyncio.run(go())


def _tokenizer():
    from tempering.models import load_policy

    _, tok = load_policy("tiny-xs")
    tok.chat_template = CHATML
    return tok


def test_conversational_prompts_go_through_the_chat_template_as_trl_renders_them():
    fam = DatasetFamily(CONVERSATIONAL * 4, reward="exact", heldout_share=0.0)
    tok = _tokenizer()
    fmt = ChatFormat(tok, system_prompt="Be kind.")
    for row, task in zip(CONVERSATIONAL, fam.split["train"]):
        assert isinstance(task.prompt, Conversation) and task.prompt.messages == row["prompt"]
        text = tok.decode(fmt.prompt_ids(task.prompt))
        has_system = row["prompt"][0]["role"] == "system"
        expected = tok.apply_chat_template(
            ([] if has_system else [{"role": "system", "content": "Be kind."}]) + row["prompt"],
            add_generation_prompt=True,
            tokenize=False,
        )
        assert text == expected and text.endswith("<|im_start|>assistant\n")
        assert "[{" not in text  # never the stringified list
        assert ("Be kind." in text) != has_system  # the row's own system message wins
    trl_data = pytest.importorskip("trl.data_utils")
    plain = ChatFormat(tok)
    for row in CONVERSATIONAL:
        assert trl_data.is_conversational(row)
        ours = tok.decode(plain.prompt_ids(Conversation(row["prompt"])))
        assert ours == trl_data.maybe_apply_chat_template({"prompt": row["prompt"]}, tok)["prompt"]
    # a started answer is continued, as TRL does
    started = Conversation([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello,"}])
    assert tok.decode(plain.prompt_ids(started)).endswith("<|im_start|>assistant\nHello,")


def test_without_a_chat_template_conversational_prompts_are_refused():
    from tempering.models import load_policy

    _, tok = load_policy("tiny-xs")
    with pytest.raises(UserError, match="chat messages.*no chat template"):
        ChatFormat(tok).prompt_ids(Conversation([{"role": "user", "content": "hi"}]))


def test_the_completion_column_is_the_reference_and_trl_reward_functions_plug_in():
    rewards = pytest.importorskip("trl.rewards")
    rows = [
        {"prompt": [{"role": "user", "content": f"Think, then say {i}."}], "completion": f"{i}", "solution": f"${i}$"}
        for i in range(6)
    ]
    fam = DatasetFamily(rows, reward=["exact", rewards.think_format_reward, rewards.accuracy_reward], heldout_share=0)
    tasks = fam.tasks("train", 6)
    answers = [f"<think>\nok\n</think>\n\\boxed{{{t.answer}}}" if k % 2 else t.answer for k, t in enumerate(tasks)]
    _, results = _verify(fam, answers)
    for k, r in enumerate(results):
        parts = r.info["rewards"]
        assert parts["exact"] == float(k % 2 == 0)  # compared as text with the completion column
        assert parts["think_format_reward"] == float(k % 2 == 1)
        assert parts["accuracy_reward"] == float(k % 2 == 1)
    seen = {}

    def mine(prompts, completions, **columns):
        seen.update(prompts=prompts, completions=completions, columns=columns)
        return [0.0] * len(completions)

    fam = DatasetFamily(rows, reward=mine, heldout_share=0)
    _verify(fam, ["x"])
    assert seen["prompts"][0] == fam.tasks("train", 1)[0].prompt.messages
    assert seen["completions"] == [[{"role": "assistant", "content": "x"}]]
    # as in TRL: the completion column is not passed, TRL's own arguments are
    assert set(seen["columns"]) == {"solution", "completion_ids", "trainer_state", "log_metric", "log_extra"}


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"prompt": 7}, r"row 1: prompt is '7' \(int\); give a string or a list of"),
        ({"prompt": {"text": "hi"}}, r"row 1: prompt is .*\(dict\)"),
        ({"prompt": [{"content": "hi"}]}, r"row 1: message 0 of prompt"),
        ({"prompt": [{"role": "robot", "content": "hi"}]}, r"role 'robot'; use one of system, user"),
        ({"messages": [{"role": "user", "content": "hi"}]}, r"language-modeling format \(for SFT\)"),
        ({"prompt": "hi", "images": ["x.png"]}, r"'images' column"),
    ],
)
def test_a_prompt_that_is_neither_text_nor_messages_is_one_line_naming_the_row(tmp_path, row, message):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"prompt": "fine"}) + "\n\n" + json.dumps(row) + "\n")
    with pytest.raises(UserError, match=message) as e:
        DatasetFamily(str(path), heldout_share=0)
    assert "\n" not in str(e.value) and "d.jsonl:3" in str(e.value)


@pytest.mark.parametrize(("n", "share", "held"), [(32, 0.25, 8), (10, 0.25, 3), (30, 0.3, 9), (5, 0.1, 1), (8, 0.0, 0)])
def test_heldout_share_holds_out_the_documented_share(n, share, held):
    assert heldout_count(n, share) == held
    fam = DatasetFamily([{"prompt": f"q{i}", "answer": "1"} for i in range(n)], heldout_share=share)
    assert len(fam.split["heldout"]) == held and len(fam.split["train"]) == n - held
    # the same prompt twice lands in one split only
    dup = DatasetFamily([{"prompt": f"q{i % n}", "answer": "1"} for i in range(2 * n)], heldout_share=share)
    assert not {t.prompt for t in dup.split["train"]} & {t.prompt for t in dup.split["heldout"]}


def test_a_reward_file_path_and_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "myrewards.py").write_text("def fn(prompts, completions, **kw):\n    return [0.5] * len(completions)\n")
    monkeypatch.chdir(tmp_path)
    for spec in ("./myrewards.py:fn", "myrewards:fn", str(tmp_path / "myrewards.py") + ":fn"):
        fam = DatasetFamily([{"prompt": "p", "answer": "a"}], reward=spec, heldout_share=0)
        assert _verify(fam, ["x"])[1][0].info["rewards"] == {"fn": 0.5}
    with pytest.raises(UserError, match=r"has no 'fm'; did you mean 'fn'\?"):
        DatasetFamily([{"prompt": "p"}], reward="./myrewards.py:fm")
    with pytest.raises(
        UserError, match=r"no module named 'nothere' in the working directory.*reward=./path/to/nothere.py:f"
    ):
        DatasetFamily([{"prompt": "p"}], reward="nothere:f")
    with pytest.raises(UserError, match=r"there is no file missing.py"):
        DatasetFamily([{"prompt": "p"}], reward="./missing.py:f")


ROWS = [{"prompt": f"q{i}", "answer": str(i)} for i in range(6)]


def test_an_error_quotes_the_completion_the_function_was_on_and_nan_names_the_function():
    def picky(prompts, completions, **_):
        return [1.0 / (c != "bad") for c in completions]

    fam = DatasetFamily(ROWS, reward=picky, heldout_share=0)
    tasks = fam.tasks("train", 3)
    with pytest.raises(UserError) as e:
        _verify(fam, ["ok", "bad", "fine"])
    assert "picky raised ZeroDivisionError" in str(e.value)
    assert f"completion 1 of the batch of 3: prompt {tasks[1].prompt!r}, completion 'bad'" in str(e.value)

    def nan(prompts, completions, **_):
        return [float("nan") if c == "bad" else 1.0 for c in completions]

    with pytest.raises(UserError, match=r"reward function .*nan returned nan on completion 2 of the batch of 3.*'bad'"):
        _verify(DatasetFamily(ROWS, reward=nan, heldout_share=0), ["ok", "fine", "bad"])


def test_a_hung_reward_is_an_error_naming_the_function_within_its_time_limit():
    def hangs(prompts, completions, **_):
        for c in completions:
            if c == "stuck":
                time.sleep(60)
        return [1.0] * len(completions)

    fam = DatasetFamily(ROWS, reward=hangs, heldout_share=0, reward_timeout=0.3)
    t0 = time.perf_counter()
    with pytest.raises(UserError) as e:
        _verify(fam, ["a", "stuck"])
    assert time.perf_counter() - t0 < 5
    msg = str(e.value)
    assert type(e.value).__name__ == "RewardTimeout" and "task.reward_timeout=0.3 s" in msg
    assert "hangs did not return" in msg and "completion 'stuck'" in msg and "time.sleep(60)" in msg
    fam.reward_timeout = 5.0
    assert _verify(fam, ["a"])[1][0].success  # the next call runs on a thread of its own


@pytest.mark.slow
def test_a_hung_reward_in_a_run_counts_as_an_environment_error(tmp_path):

    calls = []

    def sometimes(prompts, completions, **_):
        calls.append(1)
        if len(calls) == 1:
            time.sleep(30)
        return [0.0] * len(completions)

    cfg = {
        "model": {"name": "tiny-xs"},
        "rollout": {"group_size": 2, "prompts_per_step": 2, "max_new_tokens": 3},
        "task": {"train_size": 6, "heldout_size": 2, "reward_timeout": 0.5},
        "run": {"steps": 1, "out_dir": str(tmp_path / "r"), "eval_every": 0, "progress": False, "tensorboard": False},
    }
    fam = DatasetFamily(ROWS, reward=sometimes, heldout_share=0.3)
    with pytest.raises(
        UserError, match=r"task.max_error_rate.*sometimes did not return within task.reward_timeout=0.5"
    ):
        asyncio.run(trainer("train", cfg, family=fam).step())
    cfg["task"]["max_error_rate"] = 1.0
    calls.clear()
    r = asyncio.run(trainer("train", {**cfg, "run": {**cfg["run"], "out_dir": str(tmp_path / "s")}}, family=fam).step())
    assert r.metrics["env_errors"] == r.metrics["env_calls"] > 0  # counted, and the run went on


def test_math_verify_prints_no_timeout_notice():
    pytest.importorskip("math_verify")
    code = (
        "import asyncio, threading\n"
        "from tempering.envs.dataset import DatasetFamily\n"
        "fam = DatasetFamily([{'prompt': 'q', 'answer': '2'}], reward='math', heldout_share=0)\n"
        "t = fam.tasks('train', 1)[0]\n"
        "print(asyncio.run(fam.make_env(t).step('\\\\boxed{2}')).score)\n"
        "th = threading.Thread(target=lambda: print(asyncio.run(fam.make_env(t).step('2')).score))\n"
        "th.start(); th.join()\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["1.0", "1.0"] and "Timeout is disabled" not in r.stderr, r.stderr


def test_a_hub_name_says_how_to_save_it_and_a_timeout_for_no_reward_is_refused(tmp_path, monkeypatch):
    from tempering.envs.registry import make_family, set_reward_timeout

    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match=r"openai/gsm8k does not exist; .*hub name.*save_to_disk\('data/gsm8k'\)"):
        DatasetFamily("openai/gsm8k")
    with pytest.raises(UserError, match=r"task.reward_timeout=5 has no effect: task family 'arithmetic'"):
        set_reward_timeout(make_family("arithmetic"), 5)
    fam = make_family("mixture", members={"d": {"family": "dataset", "args": {"train": ROWS}}})
    set_reward_timeout(fam, 5)
    assert fam.families["d"].reward_timeout == 5
