"""Public-format tasks (Harbor: task.toml, environment/, tests/test.sh) whose tests compare /app/answer.txt
with the right sum, against wrong solutions that try to be credited without computing it: a link to the
tests' own fixture (every spelling), code the solution wrote run in the tests' Python without the tests
asking for it (an optional import of the standard library, a sourceless .pyc, an extension, a package
`__init__.py` above copied tests, an unchecked-hash .pyc of a copied helper). Each must stay wrong; the
controls (the tests import the solution's own module, a link to /usr/bin/python3) must still pass."""

import asyncio
import os
import pickle
import shutil
import subprocess
import sys

import pytest

from tempering.envs.terminal import TerminalEnv, bundle_task, injob, read_bundle
from tempering.envs.terminal.attacks import compiled, plant
from tempering.envs.terminal.bundle import required_imports
from tempering.sandbox import Sandbox

ISOLATED = [b for b in ("bwrap", "unshare") if b in Sandbox.available_backends()]
pytestmark = pytest.mark.skipif(not ISOLATED, reason="Harbor's paths need an isolating sandbox backend")

RIGHT, WRONG = "42", "12345"
TASK_TOML = (
    '[verifier]\ntimeout_sec = 60.0\n\n[agent]\ntimeout_sec = 120.0\n\n[environment]\nnetwork_mode = "no-network"\n'
)
TEST_OUTPUTS = (
    "from pathlib import Path\nfrom helpers import expected_answer\n\n\ndef test_answer():\n"
    "    assert Path('/app/answer.txt').read_text().strip() == expected_answer()\n"
)
HELPERS = f"def expected_answer():\n    return '{RIGHT}'\n"
REWARD = "if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n"
TEST_SH = {
    # pytest started from the working folder: it stays on sys.path
    "from_app": "#!/bin/bash\ncd /app\npython3 -m pytest -q -p no:cacheprovider /tests/test_outputs.py\n" + REWARD,
    # the tests copied into the working folder and run there
    "copied": "#!/bin/bash\nmkdir -p /app/tests\ncp /tests/test_outputs.py /tests/helpers.py /app/tests/\ncd /app\n"
    "python3 -m pytest -q -p no:cacheprovider tests/test_outputs.py\n" + REWARD,
}
TEST_SH["copied_folder"] = TEST_SH["copied"].replace("tests/test_outputs.py\n", "tests/\n")  # pytest collects it all
EXIT_ZERO = "import atexit, os\natexit.register(lambda: os._exit(0))\n"
"""A module that, once imported in the tests' pytest, ends it with status 0 whatever the tests found."""


def _bundle(root, shape: str, test_outputs: str = TEST_OUTPUTS):
    (root / "environment").mkdir(parents=True)
    (root / "environment" / "Dockerfile").write_text("FROM python:3.12-slim\nWORKDIR /app\n")
    (root / "tests").mkdir()
    (root / "tests" / "test.sh").write_text(TEST_SH[shape])
    (root / "tests" / "test_outputs.py").write_text(test_outputs)
    (root / "tests" / "helpers.py").write_text(HELPERS)
    (root / "tests" / "expected_answer.txt").write_text(RIGHT + "\n")
    (root / "solution").mkdir()
    (root / "solution" / "solve.sh").write_text(f"#!/bin/bash\necho {RIGHT} > /app/answer.txt\n")
    (root / "task.toml").write_text(TASK_TOML)
    (root / "instruction.md").write_text("Write the answer to /app/answer.txt.\n")
    return read_bundle(root)


def _episode(bundle, command: str) -> str:
    env = TerminalEnv(bundle_task(bundle), Sandbox(backend=ISOLATED[0]))

    async def go():
        await env.step(command)
        return await env.step("submit")

    return asyncio.run(go()).status


WRONG_ANSWER = f"echo {WRONG} > /app/answer.txt\n"
ATTACKS = {
    "link_tests_fixture": ("from_app", "ln -s /tests/expected_answer.txt /app/answer.txt"),
    "link_relative": ("from_app", "ln -s ../tests/expected_answer.txt /app/answer.txt"),
    "link_second_mount": ("from_app", "ln -s /job/tests/expected_answer.txt /app/answer.txt"),
    "link_proc_root": ("from_app", "ln -s /proc/self/root/tests/expected_answer.txt /app/answer.txt"),
    "link_chain": ("from_app", "ln -s /proc/self/root /app/r && ln -s r/tests/expected_answer.txt /app/answer.txt"),
    "stdlib_optional_import": ("from_app", WRONG_ANSWER + plant("/app/org.py", EXIT_ZERO)),
    "windows_only_import": ("from_app", WRONG_ANSWER + plant("/app/_winapi.py", EXIT_ZERO)),
    "sourceless_pyc": ("from_app", WRONG_ANSWER + compiled("/app/org.py", EXIT_ZERO)),
    "package_init_above_copied_tests": ("copied", WRONG_ANSWER + plant("/app/tests/__init__.py", EXIT_ZERO)),
    "unchecked_pyc_of_copied_helper": (
        "copied",
        WRONG_ANSWER
        + compiled(
            "/app/tests/helpers.py",
            f"def expected_answer():\n    return '{WRONG}'\n",
            "UNCHECKED_HASH",
            f"/app/tests/__pycache__/helpers.cpython-{sys.version_info[0]}{sys.version_info[1]}.pyc",
        ),
    ),
    "package_shadowing_copied_helper": (
        "copied",
        WRONG_ANSWER + plant("/app/tests/helpers/__init__.py", f"def expected_answer():\n    return '{WRONG}'\n"),
    ),
    "planted_test_module_collected": (
        "copied_folder",
        WRONG_ANSWER + plant("/app/tests/test_planted.py", EXIT_ZERO),
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ATTACKS))
def test_a_wrong_solution_stays_wrong(tmp_path, name):
    shape, command = ATTACKS[name]
    assert _episode(_bundle(tmp_path / "b", shape), command) == "incorrect"


@pytest.mark.slow
def test_an_extension_module_the_stdlib_tries_stays_unloaded(tmp_path):
    """The .so form of the optional import: its constructor would run at dlopen, before Python looks in it."""
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc to build the extension")
    import sysconfig

    so = "/app/org" + sysconfig.get_config_var("EXT_SUFFIX")
    c = "#include <unistd.h>\nstatic void bye(void){_exit(0);}\n__attribute__((constructor)) static void f(void){atexit(bye);}\n"
    command = (
        WRONG_ANSWER + plant("/tmp/org.c", "#include <stdlib.h>\n" + c) + f"gcc -shared -fPIC -o {so} /tmp/org.c\n"
    )
    assert _episode(_bundle(tmp_path / "b", "from_app"), command) == "incorrect"


SOLUTION_MODULE_TESTS = (
    "from pathlib import Path\nfrom solver import total\n\n\ndef test_answer():\n"
    "    assert str(total()) == Path('/tests/expected_answer.txt').read_text().strip()\n"
    "    assert Path('/app/answer.txt').read_text().strip() == str(total())\n"
)


@pytest.mark.slow
@pytest.mark.parametrize("answer, want", [(RIGHT, "correct"), (WRONG, "incorrect")], ids=["right", "wrong"])
def test_tests_that_import_the_solutions_module_still_judge_it(tmp_path, answer, want):
    """The tests import /app/solver.py, which imports a helper of its own from /app: both load."""
    bundle = _bundle(tmp_path / "b", "from_app", SOLUTION_MODULE_TESTS)
    command = (
        plant("/app/parts.py", f"PARTS = [{answer}, 0]\n")
        + plant("/app/solver.py", "from parts import PARTS\n\n\ndef total():\n    return sum(PARTS)\n")
        + f"echo {answer} > /app/answer.txt\n"
    )
    assert _episode(bundle, command) == want


@pytest.mark.slow
def test_a_link_into_the_image_stays(tmp_path):
    tests = (
        "import os, subprocess\nfrom pathlib import Path\n\n\ndef test_answer():\n"
        "    out = subprocess.run(['/app/py', '-c', 'print(6 * 7)'], capture_output=True, text=True).stdout\n"
        "    assert os.path.islink('/app/py') and out.strip() == Path('/app/answer.txt').read_text().strip()\n"
    )
    target = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
    command = f"ln -s {target} /app/py && echo {RIGHT} > /app/answer.txt"
    assert _episode(_bundle(tmp_path / "b", "from_app", tests), command) == "correct"


@pytest.mark.slow
@pytest.mark.parametrize("shape", list(TEST_SH))
def test_a_right_solution_passes(tmp_path, shape):
    assert _episode(_bundle(tmp_path / "b", shape), f"echo {RIGHT} > /app/answer.txt") == "correct"


OPTIONAL_FAST_JSON_TESTS = (
    "from pathlib import Path\n\ntry:\n    import ujson as json\nexcept ImportError:\n    import json\n\n\n"
    f"def test_answer():\n    assert json.loads(Path('/app/answer.txt').read_text()) == {RIGHT}\n"
)
PICKLED_ANSWER_TESTS = (
    f"import pickle\n\n\ndef test_answer():\n    with open('/app/answer.pkl', 'rb') as f:\n"
    f"        assert pickle.load(f) == {RIGHT}\n"
)
EQUAL_TO_ALL = (
    "class A(int):\n    def __eq__(self, o): return True\n    def __ne__(self, o): return False\n"
    "    __hash__ = int.__hash__\n"
)


def _pickle_of(source: str) -> str:
    """Shell that writes /app/answer.pkl, the pickle of `obj` as `source` (run from /app) defines it."""
    return plant("/tmp/dump.py", source + "pickle.dump(obj, open('/app/answer.pkl', 'wb'))\n") + (
        "cd /app && python3 /tmp/dump.py\n"
    )


YAML_ANSWER_TESTS = (
    f"import yaml\n\n\ndef test_answer():\n    with open('/app/answer.yaml') as f:\n"
    f"        assert yaml.load(f, Loader=yaml.UnsafeLoader) == {RIGHT}\n"
)
YAML_UNSAFE_LOAD_TESTS = (
    f"import yaml\nfrom pathlib import Path\n\n\ndef test_answer():\n"
    f"    assert yaml.unsafe_load(Path('/app/answer.yaml').read_text()) == {RIGHT}\n"
)
EQUAL_TO_ALL_EXPR = "type('A', (int,), {'__eq__': lambda s, o: True, '__hash__': int.__hash__})(0)"

SOLUTION_CODE_ATTACKS = {
    # the tests' own optional import finds the module the solution wrote
    "tests_optional_import": (
        OPTIONAL_FAST_JSON_TESTS,
        "echo 0 > /app/answer.txt\n"
        + plant("/app/ujson.py", EQUAL_TO_ALL + "def loads(s, *a, **k):\n    return A(0)\n"),
    ),
    # the C unpickler imports a module the solution wrote while a test function is the nearest Python frame
    "unpickler_imports_solution_module": (
        PICKLED_ANSWER_TESTS,
        plant("/app/answerlib.py", EQUAL_TO_ALL + "def make():\n    return A(0)\n")
        + _pickle_of(
            "import pickle, answerlib\n\n\nclass R:\n    def __reduce__(self):\n"
            "        return (answerlib.make, ())\n\n\nobj = R()\n"
        ),
    ),
    # a pickle whose __reduce__ evaluates code with a builtin: no module of the solution's at all
    "pickle_reduce_eval": (
        PICKLED_ANSWER_TESTS,
        _pickle_of(
            "import pickle\n\nCODE = \"type('A', (int,), {'__eq__': lambda s, o: True})(0)\"\n\n\n"
            "class E:\n    def __reduce__(self):\n        return (eval, (CODE,))\n\n\nobj = E()\n"
        ),
    ),
    # YAML's python tags: eval through the unsafe loader's apply tag, in its list and its mapping form
    "yaml_apply_eval": (
        YAML_ANSWER_TESTS,
        plant("/app/answer.yaml", f'!!python/object/apply:builtins.eval ["{EQUAL_TO_ALL_EXPR}"]\n'),
    ),
    "yaml_unsafe_load_mapping": (
        YAML_UNSAFE_LOAD_TESTS,
        plant("/app/answer.yaml", f'!!python/object/apply:eval\nargs: ["{EQUAL_TO_ALL_EXPR}"]\n'),
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SOLUTION_CODE_ATTACKS))
def test_solution_code_the_task_does_not_name_stays_out_of_the_tests(tmp_path, name):
    tests, command = SOLUTION_CODE_ATTACKS[name]
    assert _episode(_bundle(tmp_path / "b", "from_app", tests), command) == "incorrect"


@pytest.mark.slow
@pytest.mark.parametrize(
    "tests, command",
    [
        (OPTIONAL_FAST_JSON_TESTS, f"echo {RIGHT} > /app/answer.txt"),
        (PICKLED_ANSWER_TESTS, _pickle_of(f"import pickle\n\nobj = {RIGHT}\n")),
        (YAML_ANSWER_TESTS, f"echo {RIGHT} > /app/answer.yaml"),
    ],
    ids=["optional_import", "pickled_int", "yaml_int"],
)
def test_the_same_tests_still_pass_a_right_answer(tmp_path, tests, command):
    assert _episode(_bundle(tmp_path / "b", "from_app", tests), command) == "correct"


def _guarded(folder, solution_modules: str) -> dict[str, str]:
    """An environment whose Python runs the tests' guard on this host, as `sitecustomize` (in the tests'
    job every interpreter of the image runs it first, whatever its flags)."""
    (folder / "sitecustomize.py").write_text(injob.text("guard.py"))
    (folder / "guard.cfg").write_text(
        f"pycache {folder}/pycache\nsolution_modules {solution_modules}\nown_pytest_files\n"
    )
    env = {**os.environ, "PYTHONPATH": str(folder)}
    env.pop("PYTHONSAFEPATH", None)
    return env


UNGUARDED_STARTS_TESTS = """import os
import subprocess
import sys

LOAD = "import pickle; pickle.load(open('/app/answer.pkl', 'rb'))"
STARTS = {
    "-I": [sys.executable, "-I", "-c", LOAD],
    "-S": [sys.executable, "-S", "-c", LOAD],
    "empty environment, the system's python3 -E -s": ["/usr/bin/python3", "-E", "-s", "-c", LOAD],
    "env -i, frozen_modules=off": ["env", "-i", sys.executable, "-X", "frozen_modules=off", "-c", LOAD],
    "-m pickle": [sys.executable, "-I", "-S", "-m", "pickle", "/app/answer.pkl"],
    "flags in a shell variable": ["bash", "-c", 'F="-I -S"; exec python3 $F -c "$0"', LOAD],
}


def refused(argv, **kwargs):
    out = subprocess.run(argv, capture_output=True, text=True, **kwargs)
    return out.returncode != 0 and "refused in the tests' process" in out.stderr


def test_every_start_refuses_the_pickle():
    for name, argv in STARTS.items():
        assert refused(argv, env={} if "empty" in name else None), name
    assert not os.path.exists("/tmp/ran")


def test_execv_and_a_venv_of_the_tests_refuse_it():
    pid = os.fork()
    if pid == 0:
        os.execv(sys.executable, [sys.executable, "-I", "-S", "-c", LOAD])
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "/tmp/venv"], check=True)
    assert refused(["/tmp/venv/bin/python", "-I", "-S", "-c", LOAD])
    assert not os.path.exists("/tmp/ran")
"""
"""Tests whose own Python code starts Python in every way that skips the environment or `site`, each loading
the answer's pickle."""


@pytest.mark.slow
def test_python_the_tests_start_from_python_is_guarded_whatever_its_flags(tmp_path):
    """`-I`, `-S`, an empty environment, `env -i`, `-X frozen_modules=off`, `-m pickle`, flags in a shell
    variable, `os.execv` and a venv the tests make: each Python refuses a pickle that runs os.system."""
    obj = "import os\n\n\nclass P:\n    def __reduce__(self):\n        return (os.system, ('touch /tmp/ran',))\n\n\nobj = P()\n"
    command = "import pickle\n" + obj
    assert _episode(_bundle(tmp_path / "b", "from_app", UNGUARDED_STARTS_TESTS), _pickle_of(command)) == "correct"


def test_yamls_python_tags_name_only_data_types_in_the_tests_python(tmp_path):
    """With PyYAML as installed: the unsafe and full loaders (C or not) resolve a global or a module only
    where a pickle may; data types still load."""
    yaml = pytest.importorskip("yaml")
    script = (
        "import yaml\nC = getattr(yaml, 'CUnsafeLoader', yaml.UnsafeLoader)\n"
        "print(yaml.load('!!python/object/apply:collections.OrderedDict [[[a, 1]]]', Loader=yaml.UnsafeLoader),"
        " yaml.load('!!python/tuple [1, 2]', Loader=yaml.FullLoader))\n"
        "for text, loader in [('!!python/object/apply:builtins.eval [\"6*7\"]', yaml.UnsafeLoader),"
        " ('!!python/object/apply:os.system [\"true\"]', C), ('!!python/module:subprocess', yaml.Loader),"
        " ('!!python/name:os.system', yaml.FullLoader), ('!!python/object/new:subprocess.Popen [[true]]', C)]:\n"
        "    try:\n        print('loaded', yaml.load(text, Loader=loader))\n"
        "    except RuntimeError as e:\n        print('refused')\n"
        "try:\n    print('loaded', yaml.unsafe_load('!!python/object/apply:eval {args: [\"1\"]}'))\n"
        "except RuntimeError:\n    print('refused')\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=_guarded(tmp_path, "yaml"))
    assert out.stdout.splitlines() == ["OrderedDict([('a', 1)]) (1, 2)"] + ["refused"] * 6, out.stderr
    assert yaml.__version__ and out.stderr.count("a YAML document the solution wrote names") == 6


def test_the_modules_the_tests_require_are_read_from_their_files():
    tests = {
        "test_outputs.py": OPTIONAL_FAST_JSON_TESTS.encode() + b"from solver.core import total\nimport importlib\n"
        b"m = importlib.import_module('plugins')\nspec = importlib.util.spec_from_file_location('solution', '/app/s.py')\ntry:\n    import fast\nexcept (ValueError, ModuleNotFoundError):\n"
        b"    pass\ntry:\n    import strict\nexcept ValueError:\n    pass\n",
        "test.sh": b"cd /app\npython3 -c 'import cli, json; cli.main()'\npython3 -m pytest /tests\n",
    }
    assert required_imports(tests) == {"json", "solver", "importlib", "plugins", "solution", "strict", "cli", "pathlib"}


def _suite_cases():
    from tempering.envs.terminal import attacks

    controls = {f"honest_right_{label}" for label, _, _ in attacks.VARIANT_TASKS.values()}
    return {
        f"{c.name} / {c.path}": c
        for c in attacks.CASES
        if c.path in ("terminal: separate jobs", "agent: per command")
        and (c.cls in attacks.VARIANT_TASKS or c.name in controls)
    }


@pytest.mark.slow
@pytest.mark.parametrize("name", list(_suite_cases()))
def test_the_attack_suites_solution_code_cases_hold(name):
    """`tempering sandbox attacks`' cases of these classes, with their tasks' honest-right controls."""
    case = _suite_cases()[name]
    assert asyncio.run(case.run(Sandbox(backend=ISOLATED[0]))) == ""


ALL_OVER_THE_ANSWER = (
    "from pathlib import Path\n\n\ndef test_answer():\n"
    f"    assert all(float(x) == {RIGHT} for x in Path('/app/answer.txt').read_text().split())\n"
)
"""Tests that pass an empty answer: `all` over no numbers is True (as numpy's allclose over an empty array)."""


@pytest.mark.slow
@pytest.mark.parametrize(
    "tests, want",
    [(ALL_OVER_THE_ANSWER, ("mutants", "answer.txt", "emptied")), (TEST_OUTPUTS, ("ok",))],
    ids=["accepts_empty", "strict"],
)
def test_synth_check_rejects_tests_that_pass_a_mutated_reference_output(tmp_path, tests, want):
    from tempering.synth.verify import SandboxVerifier

    verdict = asyncio.run(
        SandboxVerifier(Sandbox(backend=ISOLATED[0])).verify(_bundle(tmp_path / "b", "from_app", tests))
    )
    assert verdict.stage == want[0] and all(w in verdict.summary for w in want[1:]), verdict.summary


def test_synth_check_warns_of_tests_that_deserialise_the_answer_with_code(tmp_path):
    from tempering.synth.checks import tamper_warnings

    tests = (
        "import pickle, json, yaml\nimport numpy as np\n\n\ndef test_answer():\n"
        "    a = pickle.load(open('/app/a.pkl', 'rb'))\n    b = np.load('/app/b.npy', allow_pickle=True)\n"
        "    c = yaml.load(open('/app/c.yaml'), Loader=yaml.UnsafeLoader)\n    d = json.load(open('/app/d.json'))\n"
        "    e = yaml.safe_load(open('/app/e.yaml'))\n    f = np.load('/app/f.npy')\n"
    )
    b = _bundle(tmp_path / "b", "from_app", tests)
    lines = sorted(int(str(p).split(" line ")[1].split(":")[0]) for p in tamper_warnings(b) if "deserialises" in str(p))
    assert lines == [6, 7, 8]


@pytest.mark.slow
def test_a_task_that_pays_for_an_empty_answer_is_refused_for_training(tmp_path):
    """Loaded without `synth check`: the family's screen runs the cheap stages on the training tasks."""
    from tempering.envs.terminal import TerminalFamily
    from tempering.errors import UserError

    lax, strict = _bundle(tmp_path / "lax", "from_app", ALL_OVER_THE_ANSWER), _bundle(tmp_path / "strict", "from_app")
    fam = TerminalFamily([lax, strict], heldout_share=0.0, sandbox_backend=ISOLATED[0])
    with pytest.raises(
        UserError, match=r"^terminal: task lax pays for no work \(the tests pass when answer.txt .* is emptied\)"
    ):
        fam.tasks("train", 2)
    assert fam._screened == {"lax": fam._screened["lax"], "strict": ""}
    assert [t.id for t in TerminalFamily([strict], heldout_share=0.0).tasks("train", 1)] == ["terminal:strict"]
    assert len(TerminalFamily([lax], heldout_share=0.0, screen=False).tasks("train", 1)) == 1


def _short(s: str) -> bytes:
    return b"\x8c" + bytes([len(s.encode())]) + s.encode()


def _global4(module: str, name: str) -> bytes:
    return _short(module) + _short(name) + b"\x93"


_REWARD_1 = "echo '{\"reward\": 1}' > /logs/verifier/reward.json"
PICKLE_PAYLOADS = {
    # a numpy function with effects: writes a reward file
    "numpy_savetxt": b"\x80\x02cnumpy\nsavetxt\n"
    + pickle.dumps(("/logs/verifier/reward.json", [], "%d", " ", "\n", '{"reward": 1}', "", ""), 2)[2:-1]
    + b"R.",
    # a numpy reader: the answer becomes the tests' own expected file
    "numpy_loadtxt": b"\x80\x02cnumpy\nloadtxt\n"
    + pickle.dumps(("/tests/expected_answer.txt", "int64"), 2)[2:-1]
    + b"R.",
    # a dotted name through an allowed module reaches os.system
    "numpy_dotted_os_system": b"\x80\x04"
    + _global4("numpy", "_pytesttester.os.system")
    + _short(_REWARD_1)
    + b"\x85R.",
    # a submodule of an allowed package that runs code
    "numpy_submodule_runstring": b"\x80\x04"
    + _global4("numpy.testing._private.utils", "runstring")
    + _short("open('/logs/verifier/reward.json', 'w').write('{\"reward\": 1}')")
    + b"}\x86R.",
    # the standard library's data modules, through their imports
    "collections_dotted_sys_exit": b"\x80\x04" + _global4("collections", "_sys.exit") + b"K\x00\x85R.",
    "fractions_operator_chain": b"\x80\x04"
    + _global4("fractions", "operator.methodcaller")
    + _short("system")
    + _short(_REWARD_1)
    + b"\x86R"
    + _global4("fractions", "operator.getitem")
    + _global4("fractions", "sys.modules")
    + _short("os")
    + b"\x86R\x85R.",
    "builtins_exec": b"\x80\x02cbuiltins\nexec\n" + pickle.dumps(("import os",), 2)[2:-1] + b"R.",
    "python2_name_of_exec": b"\x80\x02c__builtin__\neval\n" + pickle.dumps(("1",), 2)[2:-1] + b"R.",
}
"""Pickles that name a callable with effects through a module of plain data types (hand-written opcodes, as
no library pickles these): each must be refused when the tests load it."""


def _real_values() -> list:
    """Values of the types tests compare answers with, as numpy and the standard library make them (pandas'
    frames, in the allow-list too, are left out: importing pandas in the tests' job takes tens of seconds)."""
    import collections
    import datetime
    import decimal
    import fractions

    import numpy as np

    values = [
        np.arange(6).reshape(2, 3), np.float64(1.5), np.int64(3), np.array(["a", "bc"]), np.bool_(True),
        np.array([1, "x", None, fractions.Fraction(1, 2)], dtype=object), np.array([(1, 2.0)], dtype="i4,f8"),
        np.array(["2020-01-01"], dtype="datetime64[D]"), np.dtype(">i4"), np.zeros(3, dtype="V4"),
        np.asfortranarray(np.ones((2, 2))), np.arange(5)[::2], np.complex128(1j),
        collections.OrderedDict(a=1), collections.defaultdict(list, a=[1]), collections.deque([1], maxlen=3),
        collections.Counter("ab"), fractions.Fraction(1, 3), decimal.Decimal("1.5"), datetime.date(2020, 1, 1),
        datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone(datetime.timedelta(hours=2))), datetime.timedelta(1),
        datetime.time(1, 2), {1, 2}, frozenset([1]), bytearray(b"x"), b"x", 1 + 2j, slice(1, 2), range(3), ValueError(),
    ]  # fmt: skip
    return values


def _data_switches() -> dict[str, bytes]:
    """Pickles of numpy types whose equality the data decides: a fully masked array (masked elements are
    skipped by every `np.testing` assert, so it equals any array), and ndarray subclasses with their own
    `__array_finalize__` / `__eq__` (matrix, recarray and its records): each must be refused too."""
    import numpy as np

    values = {
        "masked_all": np.ma.masked_all((10,), dtype="int64"),
        "masked_some": np.ma.masked_array([1, 2], mask=[0, 1]),
        "matrix": np.matrix([[1, 2]]),
        "recarray": np.rec.fromrecords([(1, 2.0)], names="a,b"),
        "record": np.rec.fromrecords([(1, 2.0)], names="a,b")[0],
    }
    return {f"{k}_{p}": pickle.dumps(v, protocol=p) for k, v in values.items() for p in (2, pickle.HIGHEST_PROTOCOL)}


PICKLE_RULE_TESTS = (
    "import pickle\nfrom pathlib import Path\n\n\ndef test_plain_data_loads():\n"
    "    blobs = pickle.loads(Path('/app/values.pkl').read_bytes())\n"
    "    assert len(blobs) > 100 and all(pickle.loads(b) is not None for b in blobs)\n\n\n"
    "def test_every_payload_is_refused():\n"
    "    for name, blob in pickle.loads(Path('/app/payloads.pkl').read_bytes()).items():\n"
    "        try:\n            pickle.loads(blob)\n        except RuntimeError as e:\n"
    "            assert 'refused' in str(e), name\n        else:\n            raise AssertionError(name)\n"
)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
def test_pickles_load_plain_data_and_refuse_every_other_global(tmp_path):
    """Values pickled by numpy and the standard library at every protocol load in the tests; each payload
    of `PICKLE_PAYLOADS`, and each type whose equality its data decides (`_data_switches`), is refused (a
    payload that ran would fail the tests, or write a reward.json that disagrees with test.sh's)."""
    import base64

    payloads = base64.b64encode(pickle.dumps({**PICKLE_PAYLOADS, **_data_switches()})).decode()
    blobs = [pickle.dumps(v, protocol=p) for v in _real_values() for p in range(pickle.HIGHEST_PROTOCOL + 1)]
    values = base64.b64encode(pickle.dumps(blobs)).decode()
    command = (
        f"echo {RIGHT} > /app/answer.txt && echo {payloads} | base64 -d > /app/payloads.pkl\n"
        f"echo {values} | base64 -d > /app/values.pkl\n"
    )
    assert _episode(_bundle(tmp_path / "b", "from_app", PICKLE_RULE_TESTS), command) == "correct"


@pytest.mark.slow
def test_synth_check_rejects_an_oracle_that_hacks_its_tests(tmp_path):
    """A reference solution that writes a pickle reaching os.system through `fractions` (so its tests would
    pass any answer) fails its own gold check."""
    from tempering.synth.verify import SandboxVerifier

    b = tmp_path / "b"
    bundle = _bundle(b, "from_app", PICKLED_ANSWER_TESTS)
    payload = pickle.dumps({"hack": PICKLE_PAYLOADS["fractions_operator_chain"]})
    bundle.files["solution/solve.sh"] = (
        "#!/bin/bash\ncd /app && python3 -c \"import pickle, sys; open('answer.pkl', 'wb').write(pickle.loads("
        f"bytes.fromhex('{payload.hex()}'))['hack'])\"\n"
    ).encode()
    verdict = asyncio.run(SandboxVerifier(Sandbox(backend=ISOLATED[0])).verify(bundle))
    assert verdict.stage != "ok" and "fractions.operator.methodcaller" in verdict.summary, verdict.summary
