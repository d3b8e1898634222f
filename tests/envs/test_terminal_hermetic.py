"""The pieces of the hermetic tests' job, each on its own: packing a working folder whatever modes the
solution left, unpacking it with no way out of it (also where tarfile has no `filter=`), the links the
tests never see, the tests' Python finding installed modules first and pytest loading only the conftest.py
files, configuration and plugins the task shipped; and the sample task that took NaN."""

import asyncio
import hashlib
import os
import shutil
import stat
import sys
import tarfile
import types

import pytest

from tempering.envs.terminal import SAMPLES, TerminalEnv, bundle_task, read_bundle
from tempering.envs.terminal.injob import restore, snapshot, text
from tempering.sandbox import Job, Limits, Sandbox

ISOLATED = [b for b in ("bwrap", "unshare") if b in Sandbox.available_backends()]


def _pack(tmp_path, build) -> bytes:
    """Build app/ with `build(app)`, pack it with snapshot.py, return the tar."""
    work = tmp_path / "pack"
    (work / "app").mkdir(parents=True)
    build(work / "app")
    cwd = os.getcwd()
    os.chdir(work)
    try:
        assert snapshot.main() == 0
    finally:
        os.chdir(cwd)
    return (work / ".ws-state.tar").read_bytes()


def _unpack(tmp_path, tar: bytes, *args: str):
    work = tmp_path / "unpack"
    work.mkdir()
    (work / ".ws-state.tar").write_bytes(tar)
    cwd = os.getcwd()
    os.chdir(work)
    try:
        return restore.main(["app", *args]), work / "app"
    finally:
        os.chdir(cwd)


def test_packing_and_unpacking_keep_modes_links_and_fifos(tmp_path):
    def build(app):
        (app / "locked" / "deep").mkdir(parents=True)
        (app / "locked" / "deep" / "f").write_text("secret")
        (app / "answer.txt").write_text("12\n")
        (app / "group-writable").write_text("x")
        os.chmod(app / "group-writable", 0o664)
        os.symlink("answer.txt", app / "inside")
        os.mkfifo(app / "pipe")
        os.chmod(app / "locked" / "deep" / "f", 0)
        os.chmod(app / "locked" / "deep", 0)
        os.chmod(app / "locked", 0o500)

    tar = _pack(tmp_path, build)
    code, app = _unpack(tmp_path, tar)
    assert code == 0
    mode = lambda p: stat.S_IMODE(os.lstat(p).st_mode)
    assert (mode(app / "locked"), mode(app / "locked" / "deep")) == (0o500, 0)
    assert mode(app / "group-writable") == 0o664 and os.readlink(app / "inside") == "answer.txt"
    assert stat.S_ISFIFO(os.lstat(app / "pipe").st_mode)
    os.chmod(app / "locked" / "deep", 0o700)
    assert (mode(app / "locked" / "deep" / "f"), (app / "locked" / "deep" / "f").read_text()) == (0, "secret")


def _tar_of(members) -> bytes:
    import io

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            if kind == "link":
                info.type, info.linkname = tarfile.SYMTYPE, data
                t.addfile(info)
            elif kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                t.addfile(info)
            else:
                info.size = len(data)
                t.addfile(info, io.BytesIO(data.encode()))
    return buf.getvalue()


@pytest.mark.parametrize("has_filter", [True, False], ids=["tarfile-with-filter", "python-3.11.3-tarfile"])
@pytest.mark.parametrize(
    "members",
    [
        [("../escaped", "file", "x")],
        [("/abs/../../escaped", "file", "x")],
        [("out", "link", ".."), ("out/escaped", "file", "x")],  # through a link unpacked just before
        [("out", "link", "/"), ("out/escaped", "file", "x")],
    ],
    ids=["dotdot", "absolute", "through-relative-link", "through-absolute-link"],
)
def test_nothing_is_unpacked_outside_the_working_folder(tmp_path, monkeypatch, members, has_filter):
    if not has_filter:  # what restore.py sees of tarfile on Python 3.11.0-3.11.3: no filters
        monkeypatch.setattr(restore, "tarfile", types.SimpleNamespace(open=tarfile.open))
    code, app = _unpack(tmp_path, _tar_of(members))
    assert code == 1 and not (tmp_path / "unpack" / "escaped").exists() and not (tmp_path / "escaped").exists()


def test_the_tests_see_no_link_out_of_the_working_folder(tmp_path, capsys):
    members = [
        ("answer.txt", "file", "12"),
        ("inside", "link", "answer.txt"),
        ("inside_abs", "link", "APP/answer.txt"),
        ("reward", "link", "/logs/verifier/reward.txt"),
        ("chain_dir", "link", ".."),
        ("chain", "link", "chain_dir/outside"),  # out through another link: judged before either goes
        ("proc", "link", "/proc/self/fd/1"),
        ("home", "link", "/root/.gitconfig"),
        ("tests", "link", "/tests/expected_answer.txt"),  # read-only for the tests, and still out
        ("tests_mount", "link", "/job/tests/expected_answer.txt"),
        ("tests_relative", "link", "../../../../../../../../../../tests/expected_answer.txt"),
        ("tests_proc_root", "link", "/proc/self/root/tests/expected_answer.txt"),
        ("dev", "link", "/dev/null"),
        ("system", "link", "/usr/bin/env"),
        ("system_proc_root", "link", "/proc/self/root/usr/bin/env"),
        ("python", "link", os.path.join(sys.base_prefix, "bin", "python3")),
        ("venv_python", "link", sys.executable),
    ]
    app_dir = str(tmp_path / "unpack" / "app")
    members = [(n, k, d.replace("APP", app_dir)) for n, k, d in members]
    code, app = _unpack(tmp_path, _tar_of(members), "--tests", app_dir)
    assert code == 0
    kept = sorted(p.name for p in app.iterdir())
    assert kept == sorted(["answer.txt", "inside", "inside_abs", "system", "system_proc_root", "python", "venv_python"])
    err = capsys.readouterr().err
    assert "the tests do not see reward -> /logs/verifier/reward.txt" in err
    assert "the tests do not see tests_proc_root -> /proc/self/root/tests/expected_answer.txt" in err


def test_the_tests_see_no_module_encodings_in_the_working_folder(tmp_path, capsys):
    """A PYTHONPATH naming the working folder would import its `encodings` before the interpreter's own,
    where the tests' guard starts: the tests' unpacking removes every form of that module, and only it."""
    planted = ["encodings.py", "src/encodings.pyc", "lib/encodings.cpython-311-x86_64-linux-gnu.so"]
    planted += ["pkg/encodings/__init__.py", "encodings/__init__.pyc"]
    kept = ["encodings/utf_8.py", "data/encodings.txt", "my_encodings.py", "encodings.json"]
    members = [("encodings", "dir", ""), *((name, "file", "x = 1\n") for name in planted + kept)]
    code, app = _unpack(tmp_path, _tar_of(members), "--tests", str(tmp_path / "unpack" / "app"))
    assert code == 0
    assert sorted(str(p.relative_to(app)) for p in app.rglob("*") if p.is_file()) == sorted(kept)
    assert capsys.readouterr().err.count("Python imports `encodings` before the tests' guard") == len(planted)


def test_the_image_the_links_may_reach_is_what_the_backends_show():
    from tempering.sandbox.backends import _SYSTEM_PATHS

    assert restore.IMAGE == _SYSTEM_PATHS


def _guard(solution_modules: str = "", own_pytest_files: str = "") -> dict[str, str]:
    """The tests' guard as a plain job's start-up module (`sitecustomize`, first on PYTHONPATH=/job/tools;
    the tests' job runs it from every interpreter of the task's image instead) and its settings."""
    settings = f"pycache /tmp/pycache\nsolution_modules {solution_modules}\nown_pytest_files {own_pytest_files}\n"
    return {"tools/sitecustomize.py": text("guard.py"), "tools/guard.cfg": settings}


@pytest.mark.skipif(not ISOLATED, reason="needs an isolating sandbox backend (read-only mounts)")
def test_the_tests_python_finds_installed_modules_before_the_working_folders():
    """As in the tests' job: the start-up module first on PYTHONPATH in a read-only folder, the working
        folder as the current one, holding a planted `json.py` (a name the tests require: the installed one is
    found first), a module of their own and a distribution."""
    files = {
        "app/json.py": "raise SystemExit('planted json imported')\n",
        "app/local_module.py": "VALUE = 7\n",
        "app/planted-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: planted-dist\nVersion: 1.0\n",
    }
    code = (
        "import json, local_module, sys, importlib.metadata as m; "
        "print(json.__file__.startswith(sys.base_prefix), local_module.VALUE, "
        "'planted-dist' in {d.metadata['Name'] for d in m.distributions()}, 'pytest' in {d.metadata['Name'] for d in m.distributions()})"
    )
    env = "PYTHONPATH=/job/tools PYTHONNOUSERSITE=1"
    cmd = f'cd app && {env} python3 -c "{code}" && python3 -m json.tool /dev/null'
    job = Job(cmd=["sh", "-c", cmd], files=files, readonly_files=_guard("json local_module"))
    res = Sandbox(backend=ISOLATED[0]).run_sync(job)
    assert res.stdout.split() == ["True", "7", "False", "True"], res.stderr


@pytest.mark.skipif(not ISOLATED, reason="needs an isolating sandbox backend (read-only mounts)")
def test_the_tests_python_runs_solution_code_only_where_the_tests_import_it(tmp_path):
    """As in the tests' job: library code (a read-only module) tries optional imports that the working
    folder holds as a module, a sourceless .pyc and a package in a folder left without write bits: none
    loads. The `-c` code imports the solution's module the task names, whose own import of a helper loads."""
    import py_compile

    planted = "raise SystemExit('planted module ran')\n"
    (tmp_path / "nt.py").write_text(planted)
    py_compile.compile(str(tmp_path / "nt.py"), cfile=str(tmp_path / "nt.pyc"), doraise=True)
    files = {
        "app/org.py": planted,
        "app/nt.pyc": (tmp_path / "nt.pyc").read_bytes(),
        "app/msvcrt/__init__.py": planted,
        "app/solver.py": "import parts\n\nVALUE = parts.V\n",
        "app/parts.py": "V = 7\n",
    }
    probe = "for name in ('org', 'nt', 'msvcrt'):\n    try:\n        __import__(name)\n    except ImportError:\n        print('absent')\n"
    code = "import probe, solver; print(solver.VALUE)"
    env = "PYTHONPATH=/job/tools PYTHONNOUSERSITE=1"
    cmd = f'chmod a-w app/msvcrt && cd app && {env} python3 -c "{code}"'
    readonly = {**_guard("solver"), "tools/probe.py": probe}
    res = Sandbox(backend=ISOLATED[0]).run_sync(Job(cmd=["sh", "-c", cmd], files=files, readonly_files=readonly))
    assert res.stdout.split() == ["absent", "absent", "absent", "7"], res.stdout + res.stderr
    assert res.stderr.count("[not loaded: /job/app/") == 3, res.stderr


@pytest.mark.slow
@pytest.mark.skipif(not ISOLATED, reason="needs an isolating sandbox backend (read-only mounts)")
def test_the_tests_pytest_reads_only_configuration_and_plugins_the_task_shipped():
    """As in the tests' job, a failing test in the working folder beside a configuration that names a
    plugin passing every test: each way pytest would read it (by name, by `-c`, a test module's
    `pytest_plugins`) is refused and named on stderr; with the files' SHA-256s shipped, all are used."""
    files = {
        "app/test_x.py": "def test_x():\n    assert False\n",
        "app/test_y.py": "pytest_plugins = ['planted']\n\n\ndef test_y():\n    assert False\n",
        "app/planted.py": FORCE_PASS,
        "app/pytest.ini": PLANTED_CONFIGS["pytest.ini"],
        "app/cfg/pyproject.toml": PLANTED_CONFIGS["pyproject.toml"],
        "app/cfg/test_x.py": "def test_x():\n    assert False\n",
    }
    runs = "test_x.py; -c cfg/pyproject.toml test_x.py; -c /dev/null test_y.py; -p planted cfg/test_x.py"
    script = "".join(
        f"python3 -m pytest -q -p no:cacheprovider {args} > /dev/null && echo pass || echo fail\n"
        for args in runs.split("; ")
    )
    cmd = f"cd app && export PYTHONPATH=/job/tools PYTHONNOUSERSITE=1\n{script}"
    sha = lambda names: " ".join(hashlib.sha256(files[f"app/{n}"].encode()).hexdigest() for n in names)
    tests = sha(("test_x.py", "test_y.py", "cfg/test_x.py"))  # the task's tests: always its own
    shipped = sha(("planted.py", "pytest.ini", "cfg/pyproject.toml"))
    for own, want in zip((tests, f"{tests} {shipped}"), ("fail", "pass")):
        job = Job(
            cmd=["sh", "-c", cmd],
            files=files,
            readonly_files=_guard(own_pytest_files=own),
            limits=Limits(wall_s=120, cpu_s=120),  # four pytest runs in one job
        )
        res = Sandbox(backend=ISOLATED[0]).run_sync(job)
        assert res.stdout.split() == [want] * 4, res.stdout + res.stderr
        refused = [line for line in res.stderr.splitlines() if line.startswith("[not loaded: ")]
        assert len(refused) == (0 if want == "pass" else 6), refused  # 4 configuration files, the plugin twice


@pytest.mark.skipif(not ISOLATED, reason="Harbor's paths need an isolating sandbox backend")
def test_the_tests_python_in_their_job(tmp_path):
    """The same in the tests' real job: the solution plants json.py in the working folder, the tests run
    `python3 -m json.tool` from there (which imports json)."""
    root = shutil.copytree(SAMPLES / "csv-revenue", tmp_path / "t")
    (root / "tests" / "test.sh").write_text(
        "#!/bin/bash\ncd /app\npython3 -m json.tool totals.json > /dev/null && r=1 || r=0\n"
        "echo $r > /logs/verifier/reward.txt\n"
    )
    env = TerminalEnv(bundle_task(read_bundle(root)), Sandbox(backend=ISOLATED[0]))
    plant = "echo 'raise SystemExit(3)' > json.py; echo '{\"north\": 1}' > totals.json"

    async def go():
        return [await env.step(a) for a in (plant, "submit")]

    _, final = asyncio.run(go())
    assert final.status == "correct", final  # the installed json read totals.json; the planted one never ran


PUBLIC = os.path.join(os.path.dirname(__file__), "data", "public_suites")
FORCE_PASS = (
    "import pytest\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
    "    out = yield\n    out.get_result().outcome = 'passed'\n"
)


@pytest.mark.slow
@pytest.mark.skipif(not ISOLATED, reason="Harbor's paths need an isolating sandbox backend")
def test_tests_copied_into_the_working_folder_load_only_the_conftest_the_task_shipped(tmp_path):
    """A public task whose tests.sh copies its test into /app and runs pytest there: a conftest.py the
    solution left beside it never loads (a wrong answer stays wrong), one the task ships still does."""
    root = shutil.copytree(os.path.join(PUBLIC, "conftest-plant-vulnerable"), tmp_path / "t")
    wrong = f"cat > /app/conftest.py <<'EOF'\n{FORCE_PASS}EOF\n"
    right = "mkdir -p /app/out && echo 42 > /app/out/total.txt"

    def episode(*actions):
        env = TerminalEnv(bundle_task(read_bundle(root)), Sandbox(backend=ISOLATED[0]))

        async def go():
            return [await env.step(a) for a in (*actions, "submit")][-1]

        return asyncio.run(go())

    assert episode(wrong).status == "incorrect"
    assert episode(right).status == "correct"
    (root / "tests" / "conftest.py").write_text(FORCE_PASS)  # the task's own: loaded, even from /app
    test_sh = (root / "tests" / "test.sh").read_text()
    (root / "tests" / "test.sh").write_text(
        test_sh.replace("cp /tests/test_outputs.py /app/test_outputs.py", "cp /tests/*.py /app/")
    )
    assert episode("true").status == "correct"


PLANTED_CONFIGS = {
    "pytest.ini": "[pytest]\naddopts = -p planted\n",
    "pyproject.toml": '[tool.pytest.ini_options]\naddopts = "-p planted"\n',
    "setup.cfg": "[tool:pytest]\naddopts = -p planted\n",
}


@pytest.mark.slow
@pytest.mark.skipif(not ISOLATED, reason="Harbor's paths need an isolating sandbox backend")
def test_tests_copied_into_the_working_folder_read_only_the_pytest_configuration_the_task_shipped(tmp_path):
    """The same public task: a pytest configuration the solution left beside the copied test, naming a
    plugin it wrote that passes every test, is never read nor the plugin imported (a wrong answer stays
    wrong); a pytest.ini and plugin the task ships are still used, even from /app."""
    root = shutil.copytree(os.path.join(PUBLIC, "conftest-plant-vulnerable"), tmp_path / "t")

    def episode(*actions):
        env = TerminalEnv(bundle_task(read_bundle(root)), Sandbox(backend=ISOLATED[0]))

        async def go():
            return [await env.step(a) for a in (*actions, "submit")][-1]

        return asyncio.run(go())

    plugin = f"cat > /app/planted.py <<'EOF'\n{FORCE_PASS}EOF\n"
    for name, config in PLANTED_CONFIGS.items():
        assert episode(plugin + f"cat > /app/{name} <<'EOF'\n{config}EOF\n").status == "incorrect", name
    (root / "tests" / "planted.py").write_text(FORCE_PASS)  # the task's own: read and imported, even from /app
    (root / "tests" / "pytest.ini").write_text(PLANTED_CONFIGS["pytest.ini"])
    test_sh = (root / "tests" / "test.sh").read_text()
    (root / "tests" / "test.sh").write_text(
        test_sh.replace("cp /tests/test_outputs.py /app/test_outputs.py", "cp /tests/*.py /tests/pytest.ini /app/")
    )
    assert episode("true").status == "correct"


@pytest.mark.skipif(not ISOLATED, reason="Harbor's paths need an isolating sandbox backend")
def test_csv_revenue_refuses_nan():
    env = TerminalEnv(bundle_task(read_bundle(SAMPLES / "csv-revenue")), Sandbox(backend=ISOLATED[0]))
    nan = """python3 -c 'import json; json.dump({"north": float("nan"), "south": float("nan"), "east": float("nan")}, open("totals.json", "w"))'"""

    async def go():
        return [await env.step(a) for a in (nan, "submit")]

    _, final = asyncio.run(go())
    assert (final.status, final.score) == ("incorrect", 0.0)


def _landlock() -> bool:
    import ctypes

    return ctypes.CDLL(None, use_errno=True).syscall(444, None, 0, 1) >= 1  # landlock_create_ruleset's ABI version


@pytest.mark.skipif(not ISOLATED or not _landlock(), reason="needs an isolating sandbox backend and Landlock")
def test_the_tests_own_files_are_fenced_off_from_links_and_the_solutions_programs():
    """As in the tests' job: the tests' Python opens their fixture but not through a link (absolute, or
    relative to a folder above it); the solution's main script reads the input the tests name but neither
    their expected output nor the reward folder, and neither does its child; a script of the solution's
    that the tests start with subprocess cannot write the reward, the tests' own shell line can."""
    solution = (
        "import os, subprocess, sys\n"
        "def attempt(what, act):\n"
        "    try:\n        act()\n        print(what, 'done')\n    except OSError:\n        print(what, 'refused')\n"
        "attempt('input', lambda: open(sys.argv[1]).read())\n"
        "attempt('expected', lambda: open('/job/own/expected.txt').read())\n"
        "attempt('reward', lambda: open('/job/reward/reward.txt', 'w').write('1'))\n"
        "attempt('fifo', lambda: os.mkfifo('/job/reward/reward.txt'))\n"
        "code = subprocess.run(['sh', '-c', 'echo 1 > /job/reward/reward.txt'], stderr=subprocess.DEVNULL).returncode\n"
        "print('child', 'done' if code == 0 else 'refused')\n"
    )
    tests = (
        "import os, subprocess\n"
        "print('fixture', open('/job/own/expected.txt').read().strip())\n"
        "os.symlink('/job/own/expected.txt', '/job/app/answer.txt')\n"
        "os.symlink('../../' * 6 + 'job/own', '/job/app/d')\n"
        "for link in ('/job/app/answer.txt', '/job/app/d/expected.txt'):\n"
        "    try:\n        open(link).read()\n        print('link done')\n    except PermissionError:\n"
        "        print('link refused')\n"
        "subprocess.run(['python3', '/job/app/sum.py', '/job/own/nums.txt'])\n"
        "subprocess.run(['sh', '/job/app/run.sh'], stderr=subprocess.DEVNULL)\n"
        "print('script', 'done' if os.path.exists('/job/reward/script.txt') else 'refused')\n"
        "subprocess.run(['sh', '-c', 'echo 0 > /job/reward/reward.txt'])\n"
        "print('tests', open('/job/reward/reward.txt').read().strip())\n"
    )
    guard = _guard()
    guard["tools/guard.cfg"] += "tests_own /job/own /job/reward\nreward_dirs /job/reward\n"
    env = "PYTHONUNBUFFERED=1 PYTHONPATH=/job/tools"
    job = Job(
        cmd=["sh", "-c", f"{env} python3 /job/checks/tests.py"],
        files={"app/sum.py": solution, "app/run.sh": "echo 1 > /job/reward/script.txt\n", "reward/.keep": ""},
        readonly_files={
            **guard,
            "tools/fence.py": text("fence.py"),
            "checks/tests.py": tests,
            "own/expected.txt": "12\n",
            "own/nums.txt": "3\n4\n5\n",
        },
    )
    res = Sandbox(backend=ISOLATED[0]).run_sync(job)
    assert res.stdout.split("\n")[:-1] == [
        "fixture 12",
        "link refused",
        "link refused",
        "input done",
        "expected refused",
        "reward refused",
        "fifo refused",
        "child refused",
        "script refused",
        "tests 0",
    ], res.stdout + res.stderr
