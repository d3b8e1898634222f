import importlib

import pytest

from tempering.envs.base import TaskFamily
from tempering.envs.registry import FAMILIES, make_family
from tempering.errors import UserError


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_registered_family_is_a_task_family(name):
    mod, _, cls = FAMILIES[name].partition(":")
    assert issubclass(getattr(importlib.import_module(mod), cls), TaskFamily)


def test_unknown_family_and_bad_arguments_are_clear_errors():
    with pytest.raises(UserError, match="unknown task family 'nope'"):
        make_family("nope")
    with pytest.raises(UserError, match="unknown task family 'arithmatic'; did you mean 'arithmetic'"):
        make_family("arithmatic")
    with pytest.raises(
        UserError, match=r"no argument 'digits' \(task.args.digits\); its arguments: min_value, max_value"
    ):
        make_family("arithmetic", digits=3)
    with pytest.raises(UserError, match=r"no argument 'max_valu'.*did you mean 'max_value'\?"):
        make_family("arithmetic", max_valu=50)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_family_lists_its_arguments(name):
    """`tempering config VERB task.family=NAME`: every argument the family takes, with its default."""
    from tempering.envs.registry import family_args, family_reference

    mod, _, cls = FAMILIES[name].partition(":")
    rows = family_reference(name)
    allowed = family_args(getattr(importlib.import_module(mod), cls))
    assert [k.removeprefix("task.args.") for k, *_ in rows] == allowed


def test_tempering_config_prints_a_familys_arguments_and_their_meaning(capsys):
    from tempering.cli import main

    assert main(["config", "train", "task.family=arithmetic"]) == 0
    out = capsys.readouterr().out
    assert "| `task.args.max_value` | int | `999` | Largest operand. |" in out
    assert main(["config", "train", "task.family=reasoning_gym"]) == 0
    assert (
        "| `task.args.config` | dict[str, Any] \\| None | `None` | the generator's config arguments"
        in capsys.readouterr().out
    )
    assert main(["config", "train", "task.family=arithmatic"]) == 2
    assert "did you mean 'arithmetic'" in capsys.readouterr().err
