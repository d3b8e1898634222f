"""The command line: every verb's and sub-command's --help comes without importing torch; unknown verbs get
a suggestion; settings of a config schema are `[CONFIG.yaml] [key=value ...]` everywhere, and a removed
flag says in one line what replaced it."""

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


SUB_HELP = """
import contextlib, importlib, io, json, sys
from tempering.cli import main
from tempering.recipes.verbs import VERBS
out = {}
for verb, spec in VERBS.items():
    make = None if spec.run else getattr(importlib.import_module(spec.module), "parser", None)
    sub = make().subcommands if make else None
    for cmd in sub.choices if sub else ():
        buf = io.StringIO()
        try:
            with contextlib.redirect_stdout(buf):
                main([verb, cmd, "--help"])
        except SystemExit as e:
            code = e.code
        usage = buf.getvalue().startswith(f"usage: tempering {verb} {cmd}")
        out[f"{verb} {cmd}"] = {"code": code, "usage": usage, "torch": "torch" in sys.modules}
print(json.dumps(out))
"""


def test_every_sub_command_help_is_printed_before_torch_is_imported():
    res = subprocess.run([sys.executable, "-c", SUB_HELP], capture_output=True, text=True, check=True)
    got = json.loads(res.stdout.strip().splitlines()[-1])
    for name in ("kernels eval", "kernels hacks", "synth run", "synth check", "gui generate", "code score"):
        assert name in got
    assert got == {name: {"code": 0, "usage": True, "torch": False} for name in got}


def test_sub_command_settings_are_overrides_and_a_removed_flag_names_its_replacement(capsys):
    assert main(["kernels", "eval", "seeds=2", "--no-progress", "compile_baseline=off", "--print-config"]) == 0
    out = capsys.readouterr().out
    assert "seeds: 2\n" in out and "compile_baseline: 'off'\n" in out
    assert main(["kernels", "hacks", "--print-config"]) == 0
    assert "compile_baseline: 'off'\n" in capsys.readouterr().out  # the audit's own default
    assert (
        main(["synth", "run", "--seeds", "builtin", "--out", "o", "--policy", "p", "target=3", "--print-config"]) == 0
    )
    assert "target: 3\n" in capsys.readouterr().out
    for argv, new in [
        (["kernels", "eval", "--set", "seeds=3"], "use seeds=3"),
        (["kernels", "eval", "--compile-baseline", "off"], "use compile_baseline=off"),
        (["kernels", "hacks", "--timed-runs=3"], "use timed_runs=3"),
        (["kernels", "synth", "--out", "o", "--n", "50"], "use n=50"),
        (["synth", "run", "--seeds", "builtin", "--require-skill", "csv=3"], "use coverage.csv=3"),
        (["synth", "run", "--seeds", "builtin", "--method", "evol"], "use method=evol"),
        (["synth", "--seeds", "builtin", "--out", "o"], "use tempering synth run --seeds builtin --out o"),
    ]:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and new in err, err
    assert main(["kernels", "eval", "seeds=0.5"]) == 2  # refused from the schema, before anything runs
    assert "seeds: Input should be a valid integer" in capsys.readouterr().err


def test_unknown_verb_suggests_the_nearest(capsys):
    assert main(["trian"]) == 2
    err = capsys.readouterr().err
    assert "Did you mean 'train'?" in err and err.count("\n") == 1  # one line


def test_a_config_file_that_is_not_yaml_is_a_one_line_error(capsys, tmp_path):
    (tmp_path / "bad.yaml").write_text("a: [1\n")
    assert main(["train", str(tmp_path / "bad.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not valid YAML at line 2, column 1" in err, err


def test_config_verbs_print_their_config_and_resume_only_a_run_folder(capsys, tmp_path):
    assert main(["pretrain", "run.steps=7", "--print-config"]) == 0
    assert "steps: 7" in capsys.readouterr().out
    assert "pretrain" in parallel() and "cuda-agent" not in parallel()  # pretrain runs on the one loop
    code = None
    try:
        code = main(["pretrain", "--resume", str(tmp_path)])
    except SystemExit as e:
        code = e.code
    assert code == 2
    assert "is not a run folder (no config.yaml)" in capsys.readouterr().err
