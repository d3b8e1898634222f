"""Static checks of synthesised bundles, the disk round trip and the JSON form, on hand-made bundles."""

import json
import os

import pytest

from tempering.envs.terminal.bundle import Bundle, BundleFormatError, TaskConfig, read_bundle, write_bundle
from tempering.errors import UserError
from tempering.synth.checks import check_bundle, overlap

TEST_SH = b'cd "${APP_DIR:-/app}"\nif python3 "$TESTS_DIR/test_outputs.py"; then echo 1 > "$REWARD_FILE"; else echo 0 > "$REWARD_FILE"; fi\n'


def make(**over) -> Bundle:
    files = {
        "environment/Dockerfile": b"FROM python:3.12-slim\nWORKDIR /app\nCOPY data.txt /app/data.txt\n",
        "environment/data.txt": b"3\n4\n",
        "solution/solve.sh": b"python3 -c \"print(sum(map(int, open('data.txt').read().split())))\" > answer.txt\n",
        "tests/test.sh": TEST_SH,
        "tests/test_outputs.py": b"assert open('answer.txt').read().strip() == '7'\n",
    }
    files.update(over.pop("files", {}))
    b = Bundle(
        "sum-two",
        "Write the sum of the numbers in data.txt to answer.txt.\n",
        TaskConfig(metadata={"skills": ["shell"]}),
        {k: v for k, v in files.items() if v is not None},
    )
    for k, v in over.items():
        setattr(b, k, v)
    return b


def codes(b, **kw):
    return [p.code for p in check_bundle(b, **kw)]


def test_clean_bundle_has_no_problems():
    assert check_bundle(make()) == []


def test_disk_round_trip_is_exact(tmp_path):
    b = make(files={"environment/blob.bin": bytes(range(256))})
    b.config.metadata.update({"params": {"depth": 2, "features": ["a", "b"]}, "difficulty": "hard"})
    root = write_bundle(b, tmp_path / "sum-two")
    assert os.access(root / "solution" / "solve.sh", os.X_OK)
    again = read_bundle(root)
    assert again.files == b.files and again.instruction == b.instruction
    assert again.config == b.config


def test_json_form_round_trip_and_format_errors():
    b = make(files={"environment/blob.bin": b"\x8b\x00"})
    again = Bundle.from_json(json.loads(json.dumps(b.to_json())))
    assert again.files == b.files and again.config == b.config
    with pytest.raises(BundleFormatError, match="misses key.*files"):
        Bundle.from_json({"task_name": "x", "instruction_md": "y"})
    with pytest.raises(BundleFormatError, match="one JSON object"):
        Bundle.from_json([1, 2])
    with pytest.raises(BundleFormatError, match="content must be a string"):
        Bundle.from_json({"task_name": "x", "instruction_md": "y", "files": {"tests/test.sh": 3}})


@pytest.mark.parametrize(
    "path", ["environment/../../etc/passwd", "/etc/passwd", "environment/./x", "instruction.md", "tests\\x"]
)
def test_path_traversal_is_caught_and_never_written(tmp_path, path):
    b = make(files={path: b"x"})
    assert "path" in codes(b)
    with pytest.raises(UserError, match="refusing to write"):
        write_bundle(b, tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_missing_oracle_and_required_files():
    b = make(files={"solution/solve.sh": None})
    probs = check_bundle(b)
    assert [p.code for p in probs] == ["required_file"] and "oracle solution" in probs[0].message


@pytest.mark.parametrize(
    "test_sh,missing",
    [
        (b"python3 tests/test_outputs.py\n", "never writes the reward"),
        (b"python3 t.py && echo 1 > $REWARD_FILE\n", "never writes 0 on failure"),
    ],
)
def test_reward_must_be_written_on_pass_and_fail(test_sh, missing):
    probs = check_bundle(make(files={"tests/test.sh": test_sh}))
    assert [p.code for p in probs] == ["reward"] and missing in probs[0].message


def test_solution_and_tests_stay_out_of_the_agent_environment():
    copy_all = b"FROM python:3.12-slim\nWORKDIR /app\nCOPY . /app/\n"
    oracle = make().files["solution/solve.sh"]
    assert codes(make(files={"environment/Dockerfile": copy_all, "environment/run.sh": oracle})) == ["isolation"]
    copied = make(
        files={"environment/Dockerfile": copy_all, "environment/helper.py": make().files["tests/test_outputs.py"]}
    )
    assert codes(copied) == ["isolation"]
    assert codes(make(files={"environment/solve.sh": oracle})) == []  # in the context, not copied: not in the image
    assert codes(make(files={"environment/Dockerfile": copy_all, "environment/solve.sh": b"echo 7"})) == []  # a name
    docker = b"FROM python:3.12-slim\nCOPY ../solution/solve.sh /app/\n"
    assert "isolation" in codes(make(files={"environment/Dockerfile": docker}))
    stub = b"FROM python:3.12-slim\nWORKDIR /app\nCOPY solution_stub.py /app/solution.py\n"
    assert codes(make(files={"environment/Dockerfile": stub, "environment/solution_stub.py": b"pass\n"})) == []


def test_only_what_harbor_and_gold_verification_need_is_required():
    assert (
        codes(
            make(
                files={"tests/test_outputs.py": None, "tests/test.sh": b"echo 0 > $REWARD_FILE; echo 1 > $REWARD_FILE"}
            )
        )
        == []
    )
    prebuilt = make(files={"environment/Dockerfile": None})
    assert codes(prebuilt) == ["layout"]
    prebuilt.config.environment.docker_image = "python:3.12-slim"
    assert codes(prebuilt) == []


def test_sizes_and_name():
    assert "size" in codes(make(files={"environment/big.txt": b"x" * (2 << 20)}))
    assert codes(make(name="Bad Name!")) == ["name"]


def test_edit_mask_overlap_and_skills_against_the_seed():
    seed = make()
    assert codes(make(), seed=seed) == ["overlap"]  # a copy
    changed = make(
        instruction="Write the product of the numbers in data.txt to answer.txt.\n",
        files={"tests/test_outputs.py": b"assert open('answer.txt').read().strip() == '12'\n"},
    )
    got = check_bundle(changed, seed=seed, edit_mask=frozenset("IDST"))
    assert sorted(p.message.split("change the ")[1].split(" ")[0] for p in got) == ["fixtures", "solution"]
    assert overlap(make(), seed) == 1.0
    assert codes(make(), required_skills=frozenset({"csv"})) == ["skills"]


def test_read_bundle_errors_name_the_problem(tmp_path):
    root = write_bundle(make(), tmp_path / "b")
    (root / "environment" / "link").symlink_to("/etc/passwd")
    with pytest.raises(UserError, match="symlink"):
        read_bundle(root)
    (root / "environment" / "link").unlink()
    (root / "task.toml").write_text("version = \n")
    with pytest.raises(UserError, match="task.toml: not valid TOML"):
        read_bundle(root)
    (root / "task.toml").unlink()
    with pytest.raises(UserError, match="neither task.toml"):
        read_bundle(root)


def test_write_is_atomic_and_refuses_to_overwrite(tmp_path):
    write_bundle(make(), tmp_path / "b")
    with pytest.raises(UserError, match="exists"):
        write_bundle(make(), tmp_path / "b")
    write_bundle(make(instruction="new\n"), tmp_path / "b", overwrite=True)
    assert (tmp_path / "b" / "instruction.md").read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b"]
