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
