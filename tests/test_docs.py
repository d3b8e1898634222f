"""The README's Python example runs, example configs validate, docs/config.md matches the schemas."""

import re
from pathlib import Path

import pytest

from tempering.config import load_config
from tempering.recipes.reference import RECIPES, document, schema

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("path", sorted((ROOT / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_example_configs_validate(path):
    header = path.read_text().splitlines()[:6]
    launch = [ln for ln in header if "tempering " in ln]
    assert launch, f"{path.name} must say how to launch it in a header comment"
    verb = re.search(
        r"tempering (train|pretrain|distill|direct-opd|rgrpo|tu-opd|expand-compress)\b[^&]*" + re.escape(path.name),
        launch[-1],
    )
    recipe = verb.group(1) if verb else "train"
    load_config(schema(recipe) if recipe in RECIPES else schema("train"), path)


def test_config_reference_is_current():
    assert (ROOT / "docs" / "config.md").read_text() == document(), "regenerate with: tempering config > docs/config.md"


@pytest.mark.slow
def test_readme_python_example_runs(pretrained_dir, tmp_path, monkeypatch):
    code = re.search(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    code = code.replace('"runs/demo/pretrain/model"', repr(pretrained_dir)).replace(
        '"runs/custom"', repr(str(tmp_path / "custom"))
    )
    code = code.replace('"steps": 30', '"steps": 2').replace("range(10, 100)", "range(0, 30)")
    code = code.replace('"run": {', '"run": {"progress": False, "eval_k": 2, ')
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {})
    assert (tmp_path / "custom" / "final" / "config.json").is_file()
