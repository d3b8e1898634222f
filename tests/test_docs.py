"""The README's Python example runs, example configs validate, docs/config.md matches the schemas."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tempering.config import load_config
from tempering.recipes.reference import document, live_keys, stored_keys
from tempering.recipes.verbs import configured, schema

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").rglob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: str(p.relative_to(ROOT / "examples")))
def test_example_configs_validate(path):
    rel = str(path.relative_to(ROOT))
    header = [ln for ln in path.read_text().splitlines() if ln.startswith("#")]
    verbs = "|".join(re.escape(v) for v in configured())
    launch = [m.group(1) for ln in header if (m := re.search(rf"tempering ({verbs})\b[^&;]*?{re.escape(rel)}", ln))]
    assert launch, f"{rel} must say in a header comment how to launch it (tempering VERB {rel})"
    load_config(schema(launch[0]), path)


def test_config_reference_is_current():
    live = live_keys()
    assert stored_keys() == live, "regenerate with: make config-docs"
    assert (ROOT / "docs" / "config.md").read_text() == document(live), "regenerate with: make config-docs"


def test_config_and_a_mistyped_key_import_no_torch():
    """`tempering config VERB`, an unknown key's error and a plain-typed value's read the stored reference,
    not the schemas."""
    code = (
        "import sys; from tempering.cli import main; "
        "assert main(['config', 'train']) == 0; "
        "assert main(['train', 'loss.kl_coeff=0.1']) == 2; "
        "assert main(['distill', 'num_generations=4']) == 2; "
        "assert main(['train', 'run.steps=abc']) == 2; "
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules), file=sys.stderr)"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    lines = res.stderr.strip().splitlines()
    assert "unknown key 'loss.kl_coeff'; did you mean 'kl_coef'?" in lines[0]
    assert "'num_generations' is TRL's name: write rollout.group_size=4" in lines[1]
    assert "run.steps: Input should be a valid integer, unable to parse string as an integer" in lines[2]
    assert lines[-1] == "[]"
    assert "| `loss.kl_coef` |" in res.stdout


@pytest.mark.slow
def test_readme_python_example_runs(pretrained_dir, tmp_path, monkeypatch):
    code = re.search(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    code = code.replace('"runs/demo/pretrain/final"', repr(pretrained_dir)).replace(
        '"runs/custom"', repr(str(tmp_path / "custom"))
    )
    code = code.replace('"steps": 30', '"steps": 2').replace("range(10, 100)", "range(0, 30)")
    code = code.replace('"run": {', '"run": {"progress": False, "eval_k": 2, ')
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {})
    assert (tmp_path / "custom" / "final" / "config.json").is_file()


def _commands() -> list[tuple[str, str]]:
    """Every command line in the README's and docs' shell blocks (continuations joined)."""
    out = []
    for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in re.findall(r"```(?:bash|sh|console)?\n(.*?)```", p.read_text(), re.S):
            for ln in re.sub(r"\\\n\s*", " ", block).splitlines():
                if re.match(r"^\s*(tempering |torchrun |python -m tempering)", ln):
                    out.append((p.name, ln.strip()))
    return out


@pytest.mark.parametrize("where,line", _commands(), ids=lambda x: x if len(x) < 40 else x[:40])
def test_documented_commands_parse(where, line):
    """The documented commands, verbatim: the verb exists, the flags parse (overrides anywhere), the config
    (file + overrides) validates; a sub-command's too (`tempering kernels eval seeds=3`)."""
    import importlib
    import shlex

    from tempering.config import from_args
    from tempering.config import parse as parse_args
    from tempering.distributed.__main__ import command
    from tempering.recipes.common import parse, parser
    from tempering.recipes.verbs import VERBS

    argv = [a for a in shlex.split(line, comments=True) if a != "..."]
    if "tempering.distributed" in argv:
        verb, a = command(argv[argv.index("tempering.distributed") + 1 :])
    else:
        assert argv[0] == "tempering", line
        verb, rest = argv[1], argv[2:]
        if verb == "launch":
            at = next(i for i, x in enumerate(rest) if x in VERBS)
            verb, a = command(rest[at:])
        else:
            assert verb in VERBS, f"{where}: unknown verb in {line!r}"
            if VERBS[verb].run is None:  # a tool: its sub-commands' settings are checked the same way
                make = getattr(importlib.import_module(VERBS[verb].module), "parser", None)
                a = parse_args(make(), rest) if make else None
                if a is not None and getattr(a, "schema", None):
                    assert a.config in (None, "CONFIG"), f"{where}: {a.config} is not a file of the repository"
                    a.config = None
                    from_args(a)
                return
            a = parse(parser(verb, ""), rest)
    if a.resume:
        return
    config = a.config if a.config and (ROOT / a.config).is_file() else None
    assert a.config in (None, config, "CONFIG"), f"{where}: {a.config} does not exist"
    load_config(schema(verb), ROOT / config if config else None, a.overrides)
