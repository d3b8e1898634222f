"""Refusal reasons, local runs and tamper warnings, on tasks and lines from the public suites
(tests/envs/data/public_suites: each names its repository and commit). What the shell, dpkg and pytest
themselves do is the reference, never our own reading of them."""

import asyncio
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tempering.envs.terminal import NeedsDocker, downloads, local_image, read_bundle
from tempering.envs.terminal.bundle import Bundle
from tempering.envs.terminal.image import (
    apt_installed,
    base_kind,
    commands,
    image_name,
    install_names,
    pip_installed,
)
from tempering.sandbox import Job, Sandbox
from tempering.synth.checks import check_bundle, tamper_warnings

DATA = Path(__file__).parent / "data" / "public_suites"
LINES = {k: v["text"] for k, v in json.loads((DATA / "lines.json").read_text()).items()}
SAMPLE = Path(__file__).parents[2] / "src" / "tempering" / "envs" / "terminal" / "samples" / "csv-revenue"

needs_isolation = pytest.mark.skipif(
    Sandbox(backend="auto").backend not in ("bwrap", "unshare"), reason="needs an isolating sandbox backend"
)


def task(dockerfile: str, files: dict[str, str] | None = None) -> Bundle:
    """A small Harbor task around the lines under test."""
    b = read_bundle(SAMPLE)
    b.files["environment/Dockerfile"] = dockerfile.encode()
    b.files |= {k: v.encode() for k, v in (files or {}).items()}
    return b


# -- 1. refusal reasons that are true ---------------------------------------------------------------------
def test_redirections_and_flags_are_not_packages():
    line = LINES[
        "pip_install_redirected"
    ]  # python3 -m pip install --break-system-packages -q pytest==9.0.3 2>/dev/null
    (cmd, _) = commands(line)
    assert install_names(cmd.words[4:], "pip") == ["pytest==9.0.3"] and cmd.redirects == [("2>", "/dev/null")]
    b = read_bundle(DATA / "webservice-healthcheck")
    assert downloads(b) == []  # the project's Python has pytest: pip finds it, offline
    b.files["tests/test.sh"] = line.replace("pytest==9.0.3", "tempering-no-such-package").encode()
    assert [d.name for d in downloads(b)] == ["tempering-no-such-package"]


def test_one_container_is_one_container(tmp_path):
    root = shutil.copytree(DATA / "evoeval-0", tmp_path / "evoeval-0")
    (root / "docker-compose.yaml").write_text(LINES["compose_one_container"])  # LANG and LC_ALL, deploy limits
    b = read_bundle(root)
    assert not any(p.startswith("environment/docker-compose") for p in b.files)  # as Harbor's mapper drops it
    assert local_image(b).env == {"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}  # its variables, moved to the Dockerfile
    two = LINES["compose_one_container"] + "\n  db:\n    image: postgres:16\n"
    (root / "docker-compose.yaml").write_text(two)
    with pytest.raises(NeedsDocker) as e:
        local_image(read_bundle(root))
    assert e.value.reason == "several containers"


@pytest.mark.parametrize(
    "ref,name,kind",
    [
        (LINES["from_ecr_python"].split()[1], ("python", "3.11-slim"), "python"),
        ("docker.io/library/python:3.12@sha256:" + "a" * 64, ("python", "3.12"), "python"),
        ("mirror.gcr.io/library/ubuntu:24.04", ("ubuntu", "24.04"), "system"),
        (
            "ghcr.io/laude-institute/t-bench/python-3-13:20250620",
            ("laude-institute/t-bench/python-3-13", "20250620"),
            "python",
        ),
        ("localhost:5000/debian", ("debian", "latest"), "system"),
        ("ghcr.io/acme/python:3.12", ("acme/python", "3.12"), None),  # someone's image named python: unknown
        ("public.ecr.aws/docker/library/golang:1.22-bookworm", ("golang", "1.22-bookworm"), None),
    ],
)
def test_images_are_matched_by_repository_and_tag_whatever_the_registry(ref, name, kind):
    assert image_name(ref) == name and base_kind(ref) == kind


def test_the_ecr_mirror_of_python_runs_locally():
    b = task(LINES["from_ecr_python"] + "WORKDIR /app\nCOPY sales.csv /app/data/sales.csv\n")
    assert local_image(b).base == "python"


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="needs dpkg-query (a Debian host)")
def test_installed_debian_packages_are_looked_up():
    line = LINES["apt_install_installed"]  # apt-get install -y --no-install-recommends curl ca-certificates
    packages = ["curl", "ca-certificates", "tempering-no-such-package"]

    def dpkg(p: str) -> bool:  # dpkg itself answers
        out = subprocess.run(["dpkg-query", "-W", "-f=${Status}", p], capture_output=True, text=True)
        return out.returncode == 0 and out.stdout.endswith(" installed")

    assert [apt_installed(p) for p in packages] == [dpkg(p) for p in packages]
    b = task("FROM ubuntu:24.04\n" + line + "WORKDIR /app\n")
    if dpkg("curl") and dpkg("ca-certificates"):
        assert local_image(b).base == "system"
    b = task("FROM ubuntu:24.04\n" + line.replace("curl ", "curl tempering-no-such-package ") + "WORKDIR /app\n")
    with pytest.raises(NeedsDocker) as e:
        local_image(b)
    assert e.value.reason == "package not installed" and "installs tempering-no-such-package," in str(e.value)


def isolation(b: Bundle) -> list[str]:
    return [p.message for p in check_bundle(b) if p.code == "isolation"]


def test_a_solution_copied_into_the_image_is_found_by_what_the_dockerfile_copies(tmp_path):
    go_mod = LINES["go_mod"]  # the starter's go.mod, shipped unchanged in the solution too
    b = task(
        "FROM golang:1.23-bookworm\n" + LINES["copy_go_mod"],
        {"environment/go.mod": go_mod, "solution/go.mod": go_mod, "environment/main.go": "package main\n"},
    )
    assert isolation(b) == []
    named = task(
        "FROM python:3.12-slim\nWORKDIR /app\nCOPY . /app/\n", {"environment/repo/tests/test.sh": "make check\n"}
    )
    assert isolation(named) == []  # a file named test.sh is not the task's tests
    qc = task(LINES["copies_solution_folder"])  # COPY solution/ /app/solution/
    assert "solution/ is not in environment/" in " ".join(isolation(qc))
    root = shutil.copytree(DATA / "evoeval-0", tmp_path / "tb1")  # a Terminal-Bench 1 task: its context is the task
    (root / "Dockerfile").write_text((root / "Dockerfile").read_text() + LINES["copies_tests_and_solution"])
    (root / "main.cpp").write_text("int main() {}\n")
    (root / "testsrun-tests.sh").write_text("true\n")
    found = " ".join(isolation(read_bundle(root)))
    assert "tests/ holds tests/test_outputs.py" in found  # the mapper puts tests/ in the context: a copy of them
    assert "run-tests.sh is not in environment/" in found and "solution.sh is not in environment/" in found
    assert "main.cpp" not in found


# -- 2. more tasks run as shipped --------------------------------------------------------------------------
def _shell_writes(sandbox: Sandbox, run_line: str) -> bytes:
    """What /bin/sh itself writes for a Dockerfile RUN line (heredoc body included), run in the sandbox."""
    script = run_line.split("RUN ", 1)[1]
    job = Job(cmd=["sh", "-c", script], mounts={"/app": "app"}, outputs=["app/out"])
    res = asyncio.run(sandbox.run(job))
    assert res.exit_code == 0, res.stderr
    return res.outputs["app/out"]


@needs_isolation
@pytest.mark.parametrize("key", ["printf_csv", "printf_json", "cat_heredoc"])
def test_run_lines_that_write_files_are_reproduced_as_the_shell_writes_them(key):
    import re

    line = re.sub(r"> /app/\S+", "> /app/out", LINES[key], count=1)
    b = task(f"FROM python:3.12-slim\nWORKDIR /app\n{line}")
    assert local_image(b).files["out"] == _shell_writes(Sandbox(backend="auto"), line)


@needs_isolation
@pytest.mark.parametrize(
    "line",
    [
        r"RUN echo 'a\tb\nc' > /app/out",
        r"RUN echo -n 'no newline' > /app/out",
        r"RUN printf '%s=%d\n' a 1 b 2 > /app/out && echo more >> /app/out",
        'RUN printf "line \\"quoted\\"\\n" > /app/out',
    ],
)
def test_echo_and_printf_as_dash_reads_them(line):
    b = task(f"FROM python:3.12-slim\nWORKDIR /app\n{line}\n")
    assert local_image(b).files["out"] == _shell_writes(Sandbox(backend="auto"), line)


@pytest.mark.parametrize(
    "line,reason",
    [
        ("RUN echo $HOME > /app/out", "build step"),  # the shell would expand it
        ("RUN printf 'x' > /opt/answer.txt", "outside the working folder"),
        ("RUN sha256sum /app/out/app.bin > /app/.cache/out.sha256", "build step"),
        ("RUN printf 'x' | tee /app/out", "build step"),
    ],
)
def test_run_lines_beyond_writing_files_need_docker(line, reason):
    with pytest.raises(NeedsDocker) as e:
        local_image(task(f"FROM python:3.12-slim\nWORKDIR /app\n{line}\n"))
    assert e.value.reason == reason and e.value.line == line


def test_a_pinned_pytest_is_the_installed_one_and_a_missing_plugin_is_a_download():
    b = read_bundle(DATA / "evoeval-0")  # curl | sh for uv, uv init, uv add pytest==8.4.1, uv run pytest
    assert downloads(b) == [] and "uv()" in local_image(b).standins
    b.files["tests/test.sh"] = LINES["uvx_with_ctrf"].encode()  # uvx --with pytest-json-ctrf==0.3.5 pytest
    assert [d.name for d in downloads(b)] == ([] if pip_installed("pytest-json-ctrf") else ["pytest-json-ctrf==0.3.5"])


@pytest.mark.slow
@needs_isolation
@pytest.mark.parametrize("name", ["evoeval-0", "webservice-healthcheck"])
def test_public_tasks_verify_as_shipped(name):
    """evoeval-0: its tests install uv to run pytest==8.4.1 (the stand-ins run the installed pytest);
    webservice-healthcheck: its solution starts a server that logs to /var/log."""
    from tempering.synth.verify import SandboxVerifier

    v = asyncio.run(SandboxVerifier(Sandbox(backend="auto")).verify(read_bundle(DATA / name)))
    assert (v.accepted, v.stage) == (True, "ok"), v.summary


# -- 3. tests the solution can tamper with -----------------------------------------------------------------
def test_tamper_warnings_name_what_the_solution_can_change():
    b = read_bundle(DATA / "conftest-plant-vulnerable")  # cp the tests to /app, python3 -m pytest /app/...
    found = " ".join(p.message for p in tamper_warnings(b))
    assert "runs pytest on /app/test_outputs.py" in found and "runs `python3 -m pytest` from a folder" in found
    assert "sources $HOME/.local/bin/env" in " ".join(
        p.message
        for p in tamper_warnings(task("FROM ubuntu:24.04\nWORKDIR /app\n", {"tests/test.sh": LINES["uvx_with_ctrf"]}))
    )
    safe = "#!/bin/bash\npytest /tests/test_outputs.py && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"
    assert tamper_warnings(task("FROM python:3.12-slim\nWORKDIR /app\n", {"tests/test.sh": safe})) == []
    moved = "#!/bin/bash\ncd /tests\npython3 -m pytest test_outputs.py; echo $? > /logs/verifier/reward.txt\n"
    assert tamper_warnings(task("FROM python:3.12-slim\nWORKDIR /app\n", {"tests/test.sh": moved})) == []


PLANTS = {
    "conftest.py": (
        "import pytest\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
        "    out = yield\n    out.get_result().outcome = 'passed'\n"
    ),
    "pytest.py": "raise SystemExit(0)\n",
}


@pytest.mark.parametrize(
    "command,warned",
    [
        ("cp /tests/test_outputs.py /app/test_outputs.py && python3 -m pytest /app/test_outputs.py", True),
        ("python3 -m pytest /tests/test_outputs.py", True),
        ("cp /tests/test_outputs.py /app/ && pytest /app/test_outputs.py", True),
        ("pytest /tests/test_outputs.py", False),
        ("cd /tests && python3 -m pytest test_outputs.py", False),
    ],
)
def test_a_warned_test_run_is_passed_by_a_planted_file_and_an_unwarned_one_is_not(tmp_path, command, warned):
    """pytest itself decides: the solution's files planted in the working folder, the tests run as test.sh
    runs them in Harbor's container (from the working folder, after the solution)."""
    test_sh = f"#!/bin/bash\n{command}\n"
    assert bool(tamper_warnings(task("FROM python:3.12-slim\nWORKDIR /app\n", {"tests/test.sh": test_sh}))) == warned
    app, tests = tmp_path / "app", tmp_path / "tests"
    app.mkdir()
    tests.mkdir()
    (tests / "test_outputs.py").write_bytes((DATA / "conftest-plant-vulnerable/tests/test_outputs.py").read_bytes())
    for name, text in PLANTS.items():
        (app / name).write_text(text)
    local = command.replace("/tests", str(tests)).replace("/app", str(app)).replace("python3", shutil.which("python"))
    local = local.replace("pytest ", "pytest -p no:cacheprovider ", 1) if "-m pytest" not in local else local
    env = {"PATH": str(Path(shutil.which("python")).parent) + ":/usr/bin:/bin"}
    passed = subprocess.run(["bash", "-c", local], cwd=app, env=env, capture_output=True).returncode == 0
    assert passed == warned  # the test reads /app/out/total.txt, which nobody wrote: only a plant passes it
