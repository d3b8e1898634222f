"""verl's data and rewards: rows written by verl's own preprocessing (`benchmarks/verl_fixtures.py` ran the
row-building function of verl's examples/data_preprocess/gsm8k.py), read from parquet and JSONL; rewards
in verl's `compute_score` form; the other data files a user brings (CSV, a JSON array, non-UTF-8 text,
a DatasetDict) and TRL's full set of reward-function arguments."""

import asyncio
import json
from pathlib import Path

import pytest

from tempering.envs.dataset import DatasetFamily
from tempering.envs.registry import make_family
from tempering.errors import UserError
from tempering.models.chat import Conversation
from tempering.rollout.engine import _step

DATA = Path(__file__).parent / "data" / "verl"
PARQUET, JSONL = DATA / "gsm8k_train.parquet", DATA / "gsm8k_train.jsonl"

REWARD = """
import asyncio

seen = []


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    seen.append((data_source, solution_str, ground_truth, extra_info))
    tail = solution_str.rsplit("####", 1)
    if len(tail) < 2:
        return {"score": 0.0, "formatted": 0.0}
    return {"score": float(tail[1].strip().replace(",", "") == ground_truth), "formatted": 1.0}


async def compute_score_async(data_source, solution_str, ground_truth, extra_info=None):
    await asyncio.sleep(0)
    return 0.5 if extra_info["split"] == "train" and ground_truth in solution_str else 0.0


def raises(data_source, solution_str, ground_truth, extra_info=None):
    return int(solution_str)


def says(data_source, solution_str, ground_truth, extra_info=None):
    return "right"
"""


def _steps(family, answers):
    tasks = family.tasks("train", len(answers))

    async def go():
        return await asyncio.gather(*(_step(family.make_env(t), a, [7, 8]) for t, a in zip(tasks, answers)))

    return tasks, asyncio.run(go())


@pytest.fixture
def reward_file(tmp_path):
    path = tmp_path / "my_reward.py"
    path.write_text(REWARD)
    return path


def test_rows_from_verls_own_preprocessing_read_from_parquet_and_jsonl():
    pytest.importorskip("pyarrow")
    for path in (PARQUET, JSONL):
        fam = DatasetFamily(str(path), reward="exact", heldout_share=0.2)
        tasks = fam.split["train"] + fam.split["heldout"]
        assert len(tasks) == 5 and len(fam.split["heldout"]) == 1
        by_truth = {t.answer: t for t in tasks}
        assert set(by_truth) == {"72", "10", "5", "624", "1200"}  # reward_model.ground_truth is the answer
        t = by_truth["72"]
        assert isinstance(t.prompt, Conversation) and t.prompt.messages[0]["content"].startswith("Natalia sold clips")
        assert t.meta["data_source"] == "openai/gsm8k" and t.meta["ability"] == "math"
        assert t.meta["extra_info"]["index"] == 0 and t.meta["extra_info"]["split"] == "train"


def test_a_compute_score_gets_verls_arguments_and_agrees_with_calling_it_directly(reward_file):
    fam = make_family("dataset", train=str(PARQUET), reward=f"{reward_file}", heldout_share=0)  # its compute_score
    answers = ["so #### 72", "#### 9", "no answer", "#### 624", "#### 1,200"]
    tasks, results = _steps(fam, answers)
    import sys

    mod = next(m for n, m in sys.modules.items() if n.startswith("_tempering_rewards_my_reward"))
    calls = list(mod.seen)
    mod.seen.clear()
    for t, a, (res, _, err) in zip(tasks, answers, results):
        assert err is None
        direct = mod.compute_score("openai/gsm8k", a, t.answer, dict(t.meta["extra_info"]))["score"]
        assert res.score == direct
        assert res.info["metrics"]["compute_score/formatted"] == pytest.approx(0.8)  # the batch's mean
    assert [c[0] for c in calls] == ["openai/gsm8k"] * 5
    assert sorted(c[2] for c in calls) == sorted(t.answer for t in tasks)
    assert all(c[3]["split"] == "train" for c in calls)

    fam = make_family("dataset", train=str(JSONL), reward=f"{reward_file}:compute_score_async", heldout_share=0)
    tasks, results = _steps(fam, [f"it is {t.answer}" for t in fam.split["train"]])
    assert [r[0].score for r in results] == [0.5] * 5


@pytest.mark.parametrize(("name", "message"), [("raises", "raised ValueError"), ("says", "returned 'right'")])
def test_a_compute_score_that_raises_or_returns_a_non_number_is_named(reward_file, name, message):
    fam = make_family("dataset", train=str(JSONL), reward=f"{reward_file}:{name}", heldout_share=0)
    _, results = _steps(fam, ["x"])
    res, _, err = results[0]
    assert res.status == "env_error"
    assert f"reward function {name} " in err.message and message in err.message
    if name == "raises":
        assert err.where.startswith(f"{reward_file}:") and "int(solution_str)" in err.where


def test_a_parquet_file_missing_prompt_is_one_line_naming_file_and_row(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    rows = json.loads(JSONL.read_text().splitlines()[0])
    del rows["prompt"]
    path = tmp_path / "no_prompt.parquet"
    pq.write_table(pa.Table.from_pylist([rows]), path)
    with pytest.raises(UserError, match=rf"^{path}: row 0 has no 'prompt' column"):
        DatasetFamily(str(path))


def test_csv_json_arrays_and_misnamed_parquet_read_and_non_utf8_is_one_line(tmp_path):
    (tmp_path / "d.csv").write_text('prompt,answer\n"1+1=",2\n"2+2=",4\n')
    (tmp_path / "d.json").write_text(json.dumps([{"prompt": "1+1=", "answer": "2"}, {"prompt": "2+2=", "answer": "4"}]))
    for name in ("d.csv", "d.json"):
        fam = DatasetFamily(str(tmp_path / name), heldout_share=0.5)
        assert sorted(t.answer for t in fam.split["train"] + fam.split["heldout"]) == ["2", "4"]
    (tmp_path / "renamed.jsonl").write_bytes(PARQUET.read_bytes())  # read by its content, not its name
    assert len(DatasetFamily(str(tmp_path / "renamed.jsonl"), heldout_share=0).split["train"]) == 5
    (tmp_path / "latin1.jsonl").write_bytes(b'{"prompt": "a", "answer": "1"}\n{"prompt": "caf\xe9", "answer": "2"}\n')
    with pytest.raises(UserError, match=r"latin1.jsonl:2: not UTF-8 text \(byte 0xe9\)"):
        DatasetFamily(str(tmp_path / "latin1.jsonl"))
    (tmp_path / "bad.csv").write_text("prompt,answer\na,1,extra\n")
    with pytest.raises(UserError, match=r"bad.csv:2: more fields than the header's 2"):
        DatasetFamily(str(tmp_path / "bad.csv"))
    (tmp_path / "bad.json").write_text('[{"prompt": "a"}, 3]')
    with pytest.raises(UserError, match=r"bad.json: row 1 of the JSON array is a int"):
        DatasetFamily(str(tmp_path / "bad.json"))


def test_a_dataset_dict_gives_its_train_split(tmp_path):
    datasets = pytest.importorskip("datasets")
    one = datasets.Dataset.from_list([{"prompt": f"{i}+{i}=", "answer": str(2 * i)} for i in range(4)])
    datasets.DatasetDict({"train": one}).save_to_disk(str(tmp_path / "one"))
    assert len(DatasetFamily(str(tmp_path / "one"), heldout_share=0).split["train"]) == 4
    datasets.DatasetDict({"test": one, "train": one.select(range(2))}).save_to_disk(str(tmp_path / "two"))
    assert len(DatasetFamily(str(tmp_path / "two"), heldout_share=0).split["train"]) == 2
    datasets.DatasetDict({"a": one, "b": one}).save_to_disk(str(tmp_path / "ab"))
    with pytest.raises(UserError, match="several splits .a, b. and none is named train"):
        DatasetFamily(str(tmp_path / "ab"))


ROWS = [{"prompt": f"{i}+{i}=", "answer": str(2 * i), "topic": f"t{i}"} for i in range(4)]


def test_trl_reward_functions_get_trls_whole_argument_set():
    seen = {}

    def reward(prompts, completions, completion_ids, trainer_state, log_metric, log_extra, answer, **kw):
        seen.update(ids=completion_ids, state=trainer_state, topic=kw["topic"])
        log_metric("mine/len", sum(len(c) for c in completions) / len(completions))
        log_extra("judge", [f"saw {c}" for c in completions])
        return [float(c == a) for c, a in zip(completions, answer)]

    fam = DatasetFamily(ROWS, reward=reward, heldout_share=0)
    tasks, results = _steps(fam, ["0", "22"])
    assert seen["ids"] == [[7, 8], [7, 8]] and seen["state"].global_step == 0
    assert seen["topic"] == [t.meta["topic"] for t in tasks]
    for res, _, err in results:
        assert err is None and res.info["metrics"] == {"mine/len": 1.5}
    assert [r[0].info["extra"]["judge"] for r in results] == ["saw 0", "saw 22"]


def test_a_reward_whose_signature_does_not_fit_points_at_its_def_line(tmp_path):
    path = tmp_path / "r.py"
    path.write_text(
        "\n\ndef reward(completions, needs_this):\n    return [0.0] * len(completions)\n\n\ndef one(prompts, completions, **kw):\n    return 1.0\n"
    )
    fam = DatasetFamily(ROWS, reward=f"{path}:reward", heldout_share=0)
    (res, _, err), *_ = _steps(fam, ["0"])[1]
    assert "missing a required argument: 'needs_this'" in err.message and "**kwargs" in err.message
    assert err.where == f"{path}:3 in reward"
    fam = DatasetFamily(ROWS, reward=f"{path}:one", heldout_share=0)
    (res, _, err), *_ = _steps(fam, ["0"])[1]
    assert f"reward function one ({path}:7) returned a single float 1.0 for a batch of 1" in err.message
