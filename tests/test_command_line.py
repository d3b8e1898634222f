"""The command line: every verb's --help comes without importing torch; unknown verbs get a suggestion."""

import json
import subprocess
import sys

from tempering.cli import main
from tempering.recipes.verbs import VERBS, parallel

HELP_ALL = """
import contextlib, io, json, sys
from tempering.cli import main
out = {}
for verb in VERBS:
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            main([verb, "--help"])
    except SystemExit as e:
        code = e.code
    out[verb] = {"code": code, "usage": buf.getvalue().startswith(f"usage: tempering {verb}"), "torch": "torch" in sys.modules}
print(json.dumps(out))
"""


def test_every_verb_help_is_printed_before_torch_is_imported():
    code = f"VERBS = {list(VERBS)!r}\n" + HELP_ALL
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got == {v: {"code": 0, "usage": True, "torch": False} for v in VERBS}


def test_unknown_verb_suggests_the_nearest(capsys):
    assert main(["trian"]) == 2
    assert "Did you mean 'train'?" in capsys.readouterr().err


def test_config_verbs_print_their_config_and_resume_only_a_run_folder(capsys, tmp_path):
    assert main(["pretrain", "run.steps=7", "--print-config"]) == 0
    assert "steps: 7" in capsys.readouterr().out
    assert "pretrain" not in parallel()
    code = None
    try:
        code = main(["pretrain", "--resume", str(tmp_path)])
    except SystemExit as e:
        code = e.code
    assert code == 2
    assert "is not a run folder (no config.yaml)" in capsys.readouterr().err
