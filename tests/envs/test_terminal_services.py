"""Tasks in the shapes of public Terminal-Bench tasks (tests/envs/data/harbor_public): a solution that
leaves a web server running for the tests (the solution's job stays up; the tests run in a job of their
own that shares only its network), ubuntu and t-bench base images, Dockerfile lines that force Docker, tests that
download tools at run time, HOME, and the reasons `tempering synth check` shows."""

import asyncio
import shutil
from pathlib import Path

import pytest

from tempering.envs.terminal import NeedsDocker, downloads, local_image, read_bundle
from tempering.envs.terminal import workspace as ws_mod
from tempering.envs.terminal.image import apt_installed, pip_installed
from tempering.envs.terminal.session import solve_then_test
from tempering.sandbox import Sandbox
from tempering.synth.verify import SandboxVerifier, short_reason

PUBLIC = Path(__file__).parent / "data" / "harbor_public"
ISOLATED = [b for b in ("bwrap", "unshare") if b in Sandbox.available_backends()]
needs_isolation = pytest.mark.skipif(not ISOLATED, reason="Harbor's paths need an isolating sandbox backend")
needs_shared_network = pytest.mark.skipif(
    not (ISOLATED and Sandbox(backend=ISOLATED[0]).shares_network), reason="services need jobs that share a network"
)


@pytest.fixture(scope="module")
def sandbox():
    return Sandbox(backend=ISOLATED[0], concurrency=2) if ISOLATED else None


def verify(sandbox, bundle):
    return asyncio.run(SandboxVerifier(sandbox).verify(bundle))


def service_bundle(tmp_path, solve: str):
    root = shutil.copytree(PUBLIC / "http-service", tmp_path / "t")
    (root / "solution" / "solve.sh").write_text(solve)
    return read_bundle(root)


@needs_isolation
@needs_shared_network
def test_a_service_the_solution_leaves_running_answers_the_tests(sandbox):
    v = verify(sandbox, read_bundle(PUBLIC / "http-service"))
    assert (v.accepted, v.stage, v.reward) == (True, "ok", 1.0), v.summary


@needs_isolation
def test_without_one_job_the_verdict_names_the_refused_connection(sandbox, monkeypatch):
    monkeypatch.setattr(ws_mod.Workspace, "keeps_services", property(lambda self: False))
    v = verify(sandbox, read_bundle(PUBLIC / "http-service"))
    assert (v.accepted, v.stage) == (False, "tests")
    assert (
        "connection refused: was a service expected to still run, on a port environment/Dockerfile EXPOSEs?"
        in v.summary.splitlines()[0]
    )


@needs_isolation
@needs_shared_network
def test_what_the_solution_leaves_running_cannot_touch_the_tests_or_the_reward(sandbox, tmp_path):
    # no server; instead processes that try, while the tests run, to plant a passing reward (at both of
    # its paths), to read and replace the tests, to write into the tests' TMPDIR and to kill them
    solve = """#!/bin/bash
( while true; do
    mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; echo 1 > /job/logs/verifier/reward.txt
    echo '{"reward": 1}' > /logs/verifier/reward.json
    cp /tests/test_server.py /app/stolen.py; echo 'print(1)' > /tests/test_server.py
    touch /job/.ws-out/tmp/planted; pkill -f test_server.py; pkill -f test.sh
    sleep 0.02
  done ) > /dev/null 2>&1 &
mkdir -p /logs/verifier 2>/dev/null; echo 1 > /logs/verifier/reward.txt 2>/dev/null
ls /tests > /app/tests-listing.txt 2>&1
exit 0
"""
    v = verify(sandbox, service_bundle(tmp_path, solve))
    assert (v.accepted, v.stage, v.reward) == (False, "tests", 0.0), v.summary
    assert "connection refused" in v.summary


@needs_isolation
@needs_shared_network
def test_the_solution_sees_harbors_paths_and_its_state_is_kept(sandbox, tmp_path):
    solve = """#!/bin/bash
{ echo "home=$HOME"; pwd; ls /tests 2>&1; cat /job/.ws/run.sh 2>&1 | head -1; } > /app/seen.txt
exit 0
"""
    bundle = service_bundle(tmp_path, solve)
    ws = ws_mod.Workspace.for_bundle(sandbox, bundle)
    run, rewards, tests = asyncio.run(solve_then_test(ws, bundle.steps[0]))
    assert run.exit_code == 0 and rewards.values == {"reward": 0.0} and tests.exit_code == 0
    seen = asyncio.run(ws.run("cat seen.txt\n", 10)).output.splitlines()
    assert seen[0] == f"home={ws.home or '/job'}" and seen[1] == "/app"
    assert "No such file or directory" in seen[2]  # the tests are in their own job, not in the solution's


def test_harbor_home_is_root_where_the_sandbox_can_show_it(monkeypatch):
    assert ws_mod.harbor_home("/root") == "/root" and ws_mod.harbor_home("/root/task") is None
    monkeypatch.setattr(ws_mod, "check_mount", lambda p: None)
    assert ws_mod.harbor_home("/app") == "/root"

    def refuse(p):
        raise ws_mod.UserError("the Python installation lies below /root")

    monkeypatch.setattr(ws_mod, "check_mount", refuse)
    assert ws_mod.harbor_home("/app") is None


@pytest.mark.parametrize(
    "base",
    [
        "ghcr.io/laude-institute/t-bench/python-3-13:20250620",
        "ghcr.io/laude-institute/t-bench/python-3-13@sha256:" + "b" * 64,
        "ubuntu:24.04",
        "docker.io/library/ubuntu:24.04",
        "ghcr.io/laude-institute/t-bench/ubuntu-24-04:latest",
        "python:3.13-slim-bookworm",
    ],
)
def test_python_and_plain_system_images_are_recognised(base):
    b = read_bundle(PUBLIC / "ubuntu-log-report")
    b.files["environment/Dockerfile"] = f"FROM {base}\nWORKDIR /app\nCOPY access.log /app/access.log\n".encode()
    assert local_image(b).files == {"access.log": b.files["environment/access.log"]}


@pytest.mark.parametrize(
    "dockerfile,n,line",
    [
        ("FROM alpine:3.20\nWORKDIR /app\n", 1, "FROM alpine:3.20"),
        ("FROM ghcr.io/acme/python:3.12\nWORKDIR /app\n", 1, "FROM ghcr.io/acme/python:3.12"),
        (
            "FROM ubuntu:24.04\n# tools\nRUN apt-get update && \\\n    apt-get install -y tempering-absent-tool\nWORKDIR /app\n",
            3,
            "RUN apt-get update && apt-get install -y tempering-absent-tool",
        ),
        (
            "FROM python:3.13\nRUN pip install tempering-no-such-package==1.0\nWORKDIR /app\n",
            2,
            "RUN pip install tempering-no-such-package==1.0",
        ),
        ("FROM python:3.13\nWORKDIR /app\nRUN make build\n", 3, "RUN make build"),
    ],
)
def test_the_line_that_forces_docker_is_named(dockerfile, n, line):
    b = read_bundle(PUBLIC / "ubuntu-log-report")
    b.files["environment/Dockerfile"] = dockerfile.encode()
    with pytest.raises(NeedsDocker) as e:
        local_image(b)
    assert e.value.line == line and str(e.value).startswith(f"Dockerfile line {n}: ")


def test_installs_of_what_the_sandbox_has_are_reproduced():
    b = read_bundle(PUBLIC / "tbench-python-stats")
    assert local_image(b).base == "python"  # RUN pip install pytest: the project's Python has it
    b.files["environment/Dockerfile"] = b"FROM ubuntu:24.04\nRUN apt-get update && apt-get install -y bash coreutils\n"
    b.files["environment/Dockerfile"] += b"RUN rm -rf /var/lib/apt/lists/* && mkdir -p /app/out\nWORKDIR /app\n"
    img = local_image(b)
    assert img.base == "system" and "out" in img.dirs


def test_downloads_at_run_time_are_named():
    b = read_bundle(PUBLIC / "uvx-ctrf-tests")  # uv's installer and a pinned pytest: the stand-ins run them
    ctrf = [] if pip_installed("pytest-json-ctrf") else ["pytest-json-ctrf==0.3.5"]
    assert [d.name for d in downloads(b)] == ctrf
    assert downloads(read_bundle(PUBLIC / "uv-pytest-tests")) == []  # uv venv, uv pip install, uv run pytest
    b.files["tests/test.sh"] = (
        b"#!/bin/bash\n# pip install nothing here\nuvx tempering-no-such-tool check . && npm install left-pad\n"
    )
    assert [d.name for d in downloads(b)] == ["tempering-no-such-tool", "left-pad"]
    b.files["tests/test.sh"] = b"pip install pytest tempering-no-such-package\npip install -U pytest -r req.txt\n"
    assert [str(d) for d in downloads(b)] == [
        "tempering-no-such-package (pip install, tests/test.sh line 1)",  # pytest is there: satisfied offline
        "pytest (pip install, tests/test.sh line 2)",
        "the packages of req.txt (pip install -r, tests/test.sh line 2)",
    ]
    b.files["tests/test.sh"] = b"#!/bin/bash\ncurl -fsSL https://deb.nodesource.com/setup_20.x | bash -\n"
    assert [str(d) for d in downloads(b)] == ["deb.nodesource.com (curl | sh, tests/test.sh line 2)"]
    assert downloads(read_bundle(PUBLIC / "http-service")) == []


def test_check_table_shows_the_cause():
    summary = (
        "after the oracle solution ran, the tests wrote reward 0 ({'reward': 0.0}). Test output:\n"
        'Traceback (most recent call last):\n  File "/tests/t.py", line 3\n'
        "AssertionError: GET /total answered {'total': 99}\n"
    )
    cell = short_reason(summary)
    assert cell.startswith("after the oracle solution ran") and cell.endswith("answered {'total': 99}")


def test_check_table_escapes_markup_and_shows_the_cause(tmp_path, capsys, monkeypatch):
    from tempering.cli import main

    monkeypatch.setenv("COLUMNS", "400")  # one line a row: the cells are not folded

    for name in ("ubuntu-log-report", "uvx-ctrf-tests"):
        shutil.copytree(PUBLIC / name, tmp_path / name)
    lax = tmp_path / "ubuntu-log-report" / "tests" / "test.sh"
    lax.write_text("#!/bin/bash\nmkdir -p /logs/verifier\necho 1 > /logs/verifier/reward.txt\n")
    ctrf = tmp_path / "uvx-ctrf-tests" / "tests" / "test.sh"
    ctrf.write_text(ctrf.read_text().replace("pytest-json-ctrf", "tempering-no-such-plugin"))
    assert main(["synth", "check", str(tmp_path)]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "[reward]" in out  # the check's code, not eaten as markup
    assert "tempering-no-such-plugin==0.3.5 (uvx, tests/test.sh line 8)" in out.replace("│ ", "").replace(" │", "")
    assert "[tamper]" in out and "$HOME/.local/bin/env" in out  # the warning of the uvx task


def _survey_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("harbor_run", ROOT / "examples" / "harbor" / "run.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ROOT = Path(__file__).resolve().parents[2]


def test_the_results_say_what_synth_check_says_of_lax_tests():
    import json

    from tempering.synth.verify import check_one

    verdict, stage, why = asyncio.run(check_one(read_bundle(ROOT / "examples/harbor/bundles/lax-tests"), None))
    assert (verdict, stage) == ("rejected", "static") and why.startswith("[reward]")
    results = json.loads((ROOT / "docs" / "results" / "harbor.json").read_text())
    (row,) = [r for r in results["bundles"] if r["bundle"] == "lax-tests"]
    assert (row["result"], row["stage"]) == ("rejected", "static: reward") and row["why"].startswith("[reward]")
    assert "| lax-tests | rejected | static: reward |" in (ROOT / "docs" / "results" / "harbor.md").read_text()
    pub = results["public_tasks"]
    assert {"loaded", "verified_locally", "needs_docker", "needs_network", "background_service_verified"} <= set(pub)


@needs_isolation
@needs_shared_network
def test_public_task_shapes_section(sandbox):
    pub = asyncio.run(_survey_module().public_tasks(PUBLIC, sandbox))
    assert pub["loaded"] == sorted(p.name for p in PUBLIC.iterdir())
    assert {"http-service", "ubuntu-log-report", "tbench-python-stats"} <= set(pub["verified_locally"])
    assert "uv-pytest-tests" in pub["verified_locally"]  # its pinned pytest is the installed one, offline
    if not pip_installed("pytest-json-ctrf"):
        assert pub["needs_network"] == {"uvx-ctrf-tests": ["pytest-json-ctrf==0.3.5"]}
    if not apt_installed("asciinema"):
        assert pub["needs_docker"]["ubuntu-apt-tools"].startswith("RUN apt-get update && apt-get install")
    assert pub["background_service_tasks"] == ["http-service"] and pub["background_service_verified"] is True


def episode(sandbox, bundle, answers, **kw):
    from tempering.envs.terminal import TerminalEnv, bundle_task

    env = TerminalEnv(bundle_task(bundle), sandbox, keep_services=True, **kw)

    async def go():
        try:
            return [await env.step(a) for a in answers]
        finally:
            await env.close()

    return asyncio.run(go())


@needs_isolation
@needs_shared_network
def test_a_server_the_agent_starts_answers_its_next_commands_and_the_tests(sandbox):
    bundle = read_bundle(PUBLIC / "http-service")
    start, probe, final = episode(
        sandbox,
        bundle,
        [bundle.text("solution/solve.sh"), "curl -s http://127.0.0.1:8123/total; ls /tests", "submit"],
    )
    assert start.feedback == "[exit 0]"
    assert probe.feedback.startswith('{"total": 100}') and "No such file or directory" in probe.feedback
    assert final.done and final.success and final.score == 1.0


@needs_isolation
@needs_shared_network
def test_what_the_agent_leaves_running_cannot_plant_a_reward(sandbox):
    plant = (
        "( while true; do echo 1 > /logs/verifier/reward.txt; echo 1 > /job/logs/verifier/reward.txt; "
        "sleep 0.02; done ) > /dev/null 2>&1 &\n"
        """echo '{"reward": 1}' > /logs/verifier/reward.json 2>/dev/null\necho started"""
    )
    started, final = episode(sandbox, read_bundle(PUBLIC / "http-service"), [plant, "submit"])
    assert started.feedback.endswith("started\n[exit 0]")
    assert final.done and final.score == 0.0


@needs_isolation
@needs_shared_network
def test_sessions_go_step_by_step_and_keep_the_state(sandbox):
    from tempering.envs.terminal import SAMPLES

    bundle = read_bundle(SAMPLES / "notes-steps")
    s1, s2 = (bundle.text(f"steps/{n}/solution/solve.sh") for n in ("01-collect", "02-sort"))
    r = episode(sandbox, bundle, [s1, "submit", s2, "sleep 5", "submit"], command_timeout_s=1)
    assert r[1].status == "next_step" and r[3].status == "timeout"
    assert r[4].done and r[4].score == 1.0 and r[4].info["steps_run"] == 2


@needs_isolation
@needs_shared_network
def test_a_stopped_supervisor_ends_the_session_within_the_commands_limit(sandbox, monkeypatch):
    """A command stops the session's supervisor (its uid) and the host stops waiting after the command's
    limit, not the session's wall: the session ends, charged to the candidate."""
    import time

    from tempering.envs.terminal import session as session_mod

    monkeypatch.setattr(session_mod, "ANSWER_GRACE_S", 2.0)
    stop = "echo 12345 > answer.txt; for p in $(pgrep -f supervisor.py); do kill -STOP $p; done; echo stopped"
    t0 = time.monotonic()
    r = episode(sandbox, read_bundle(PUBLIC / "http-service"), [stop, "echo second", "submit"], command_timeout_s=2)
    assert time.monotonic() - t0 < 60
    assert r[0].feedback.startswith("[the command could not run: session ended: no answer within")
    assert r[1].feedback.startswith("[the command could not run: session ended")
    assert r[2].done and r[2].status == "incorrect" and "session ended" in r[2].info["reward_error"]


FIB_SERVER = """import http.server, sys, urllib.parse
def fib(n):
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        n = int(urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)["n"][0])
        self.send_response(200); self.end_headers(); self.wfile.write(str(fib(n)).encode())
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""
"""The tests' own reference server (and the honest solution's): GET /fib?n=N answers fib(N)."""
CONSTANT_SERVER = FIB_SERVER.replace("str(fib(n)).encode()", 'b"42"')
RELAY_SERVER = FIB_SERVER.replace(
    "str(fib(n)).encode()", '__import__("urllib.request").request.urlopen("http://127.0.0.1:9001" + self.path).read()'
)


def fib_bundle(tmp_path, expose: str = "EXPOSE 9000"):
    """A task whose tests start their reference server on 9001 and compare the solution's on 9000 with it."""
    root = tmp_path / "fib"
    (root / "environment").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "task.toml").write_text('schema_version = "1.1"\n[verifier]\ntimeout_sec = 60.0\n')
    (root / "instruction.md").write_text("Serve GET /fib?n=N on 127.0.0.1:9000, answering fib(N).\n")
    (root / "environment" / "Dockerfile").write_text(f"FROM python:3.11-slim\nWORKDIR /app\n{expose}\n")
    (root / "tests" / "ref_server.py").write_text(FIB_SERVER)
    (root / "tests" / "test.sh").write_text(
        "#!/bin/bash\nmkdir -p /logs/verifier\npython3 /tests/ref_server.py 9001 &\n"
        "until python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 9001))' 2>/dev/null; do sleep 0.1; done\n"
        "python3 - <<'PY' && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"
        "import urllib.request\nget = lambda port, n: urllib.request.urlopen(f'http://127.0.0.1:{port}/fib?n={n}', "
        "timeout=5).read()\nassert all(get(9000, n) == get(9001, n) for n in (0, 1, 7, 30))\nPY\n"
    )
    return read_bundle(root)


def serve(source: str, *ports: int) -> str:
    starts = "".join(f"nohup python3 /app/server.py {p} > /dev/null 2>&1 &\n" for p in ports)
    waits = "".join(
        f"until python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {p}))' 2>/dev/null; do sleep 0.1; done\n"
        for p in ports
    )
    return f"cat > /app/server.py <<'PY'\n{source}PY\n{starts}{waits}echo started"


SHARING = [b for b in ISOLATED if Sandbox(backend=b).shares_network]
FIB_CASES = {
    "honest": (serve(FIB_SERVER, 9000), 1.0),
    # the port of the tests' reference server, bound first by the solution to answer as its wrong server
    "prebinds_the_tests_port": (serve(CONSTANT_SERVER, 9000, 9001), 0.0),
    # a server that relays each question to the tests' own reference server
    "relays_to_the_tests_server": (serve(RELAY_SERVER, 9000), 0.0),
}


@pytest.mark.slow
@pytest.mark.parametrize(
    "backend, case",
    # every case on the first backend that keeps services; the honest one on the others (the bridge is the same)
    [(b, c) for b in SHARING for c in FIB_CASES if b == SHARING[0] or c == "honest"],
)
def test_the_tests_reach_the_declared_port_one_way_and_bind_their_own(backend, case, tmp_path):
    solution, reward = FIB_CASES[case]
    started, final = episode(Sandbox(backend=backend), fib_bundle(tmp_path), [solution, "submit"])
    assert started.feedback.endswith("started\n[exit 0]"), started.feedback
    assert final.done and final.score == reward, final.info


def test_a_family_that_keeps_services_names_the_tasks_that_declare_no_port(tmp_path):
    """A port is declared by EXPOSE or by a local address in the instruction; `quiet` has neither."""
    from tempering.envs.terminal import TerminalFamily

    fib_bundle(tmp_path / "a", expose="")
    (tmp_path / "a" / "fib" / "instruction.md").write_text("Serve GET /fib?n=N on a local port, answering fib(N).\n")
    fib_bundle(tmp_path / "b")
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    shutil.move(str(tmp_path / "a" / "fib"), tasks / "quiet")
    shutil.move(str(tmp_path / "b" / "fib"), tasks / "serving")
    with pytest.warns(UserWarning, match=r"1 bundle\(s\) declare no service port .*: quiet$"):
        TerminalFamily(str(tasks), keep_services=True, screen=False)
