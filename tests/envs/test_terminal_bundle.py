"""Harbor's task format: read -> write -> read gives the same task, Harbor's keys keep their meaning,
Terminal-Bench 1 folders are converted, a folder loads what it can, the local Dockerfile subset."""

import shutil

import pytest
import tomllib

from tempering.envs.terminal import SAMPLES, harbor_problems, load_bundles, local_image, read_bundle, write_bundle
from tempering.envs.terminal.bundle import BundleError, TaskConfig
from tempering.envs.terminal.workspace import NeedsDocker

SAMPLE_NAMES = sorted(p.name for p in SAMPLES.iterdir() if p.is_dir())


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_round_trip_gives_the_same_task(tmp_path, name):
    first = read_bundle(SAMPLES / name)
    assert harbor_problems(first) == []
    root = write_bundle(first, tmp_path / name)
    again = read_bundle(root)
    assert (again.name, again.instruction, again.files) == (first.name, first.instruction, first.files)
    assert again.config.model_dump() == first.config.model_dump()
    assert again.config.to_toml() == first.config.to_toml()
    assert (root / "environment").is_dir() and oct(root.stat().st_mode & 0o777) == "0o755"


def test_harbor_keys_keep_their_meaning_and_no_default_is_invented():
    legacy = read_bundle(SAMPLES / "legacy-config")
    env = legacy.config.environment
    assert (legacy.config.schema_version, env.memory_mb, env.storage_mb, env.network_mode) == (
        "1.0",
        1024,
        512,
        "no-network",
    )
    written = tomllib.loads(legacy.config.to_toml())
    assert written["schema_version"] == "1.0" and "version" not in written
    assert written["environment"] == {
        "build_timeout_sec": 300.0,
        "cpus": 1,
        "memory_mb": 1024,
        "storage_mb": 512,
        "network_mode": "no-network",
    }
    # a task that says nothing about resources or network gets Harbor's defaults: public, provider sizes
    bare = TaskConfig.model_validate({"metadata": {"x": 1}})
    assert bare.environment.network_mode == "public" and bare.environment.memory_mb is None
    assert tomllib.loads(bare.to_toml()) == {"schema_version": "1.1", "metadata": {"x": 1}}
    assert TaskConfig.model_validate({"environment": {"allow_internet": True}}).environment.network_mode == "public"
    # unknown keys survive
    odd = TaskConfig.model_validate({"custom": {"a": 1}, "verifier": {"timeout_sec": 5, "extra_key": "v"}})
    assert tomllib.loads(odd.to_toml())["custom"] == {"a": 1} and "extra_key" in odd.to_toml()


@pytest.mark.parametrize(
    "toml,why",
    [
        ("[environment]\nmemory = '4G'\nmemory_mb = 2048\n", "conflicting memory"),
        ("[environment]\nmemory = 'lots'\n", "must look like '4G'"),
        ("[environment]\nallowed_hosts = ['pypi.org']\n", "only valid with network_mode = 'allowlist'"),
        ("[environment]\nnetwork_mode = 'private'\n", "network_mode"),
    ],
)
def test_bad_task_toml_is_refused_with_the_reason(tmp_path, toml, why):
    root = shutil.copytree(SAMPLES / "csv-revenue", tmp_path / "t")
    (root / "task.toml").write_text(toml)
    with pytest.raises(BundleError, match=why) as e:
        read_bundle(root)
    assert e.value.reason == "invalid task.toml"


def test_multi_step_task_and_its_steps():
    b = read_bundle(SAMPLES / "notes-steps")
    steps = b.steps
    assert [s.name for s in steps] == ["01-collect", "02-sort"] and b.instruction == ""
    assert set(steps[0].tests) == {"check.py", "test.sh"}  # the task's tests/ under the step's own
    assert steps[0].tests["test.sh"] != steps[1].tests["test.sh"] and steps[0].min_reward == 1.0
    assert (steps[0].agent_timeout_s, steps[0].verifier_timeout_s) == (120.0, 30.0)
    assert "/app/inbox/" in steps[0].instruction and "solve.sh" in steps[1].solution


def test_terminal_bench_1_folder_is_converted_on_read():
    b = read_bundle(SAMPLES / "tb1-word-count")
    assert sorted(b.files) == [
        "environment/Dockerfile",
        "environment/poem.txt",
        "solution/solve.sh",
        "tests/run-tests.sh",
        "tests/test.sh",
        "tests/test_outputs.py",
    ]  # the stock docker-compose.yaml is dropped, as Harbor's mapper drops it
    assert b.instruction.startswith("Count the words of /app/poem.txt")
    assert (b.config.agent.timeout_sec, b.config.verifier.timeout_sec) == (180.0, 30.0)
    assert b.metadata["difficulty"] == "easy" and b.metadata["source_format"] == "terminal-bench-1"
    assert b"run-tests.sh" in b.files["tests/test.sh"] and harbor_problems(b) == []


def test_custom_compose_of_a_terminal_bench_1_task_needs_docker(tmp_path):
    root = shutil.copytree(SAMPLES / "tb1-word-count", tmp_path / "tb1")
    (root / "docker-compose.yaml").write_text("services:\n  client:\n    build: .\n  db:\n    image: postgres\n")
    b = read_bundle(root)
    assert "environment/docker-compose.yaml" in b.files
    with pytest.raises(NeedsDocker, match="Docker Compose"):
        local_image(b)


def test_a_folder_loads_what_it_can_and_says_why_not_for_the_rest(tmp_path):
    for name in ("csv-revenue", "tb1-word-count"):
        shutil.copytree(SAMPLES / name, tmp_path / name)
    bad = shutil.copytree(SAMPLES / "csv-revenue", tmp_path / "no-tests")
    (bad / "tests" / "test.sh").unlink()
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "README.md").write_text("not a task")
    loaded, rejected = load_bundles(tmp_path)
    assert [b.name for b in loaded] == ["csv-revenue", "tb1-word-count"]
    assert rejected["no-tests"].startswith("layout: no tests/test.sh")
    assert rejected["notes"].startswith("not a task folder")


def test_other_files_are_kept(tmp_path):
    root = shutil.copytree(SAMPLES / "csv-revenue", tmp_path / "t")
    (root / "README.md").write_text("# notes\n")
    (root / "trajectory.json").write_text("{}")
    again = read_bundle(write_bundle(read_bundle(root), tmp_path / "out" / "t"))
    assert again.files["README.md"] == b"# notes\n" and again.files["trajectory.json"] == b"{}"


@pytest.mark.parametrize(
    "dockerfile,ok",
    [
        ("FROM python:3.12-slim@sha256:" + "a" * 64 + "\nWORKDIR /app\n", True),
        ("FROM docker.io/library/python:3.11\nWORKDIR /app\n", True),
        ("FROM --platform=linux/amd64 python:3.12 AS base\nWORKDIR /srv/task\nCOPY sales.csv data/\n", True),
        ("FROM python:3.12-slim\n", False),  # no working folder
        ("FROM python:3.12-slim\nWORKDIR /app\nRUN pip install tempering-no-such-package\n", False),
        ("FROM ghcr.io/acme/python:3.12\nWORKDIR /app\n", False),
    ],
)
def test_local_dockerfile_subset(dockerfile, ok):
    b = read_bundle(SAMPLES / "csv-revenue")
    b.files["environment/Dockerfile"] = dockerfile.encode()
    if ok:
        img = local_image(b)
        assert img.workdir in ("/app", "/srv/task")
    else:
        with pytest.raises(NeedsDocker):
            local_image(b)
    if "data/" in dockerfile:
        assert local_image(b).files == {"data/sales.csv": b.files["environment/sales.csv"]}
