"""Tool environments in TRL's environment_factory form, for the tool-calling tests."""

from tempering.envs.tools import run_python


class Counter:
    """A counter the model moves with tools; the task says which total to reach."""

    def __init__(self):
        self.total = 0
        self.target = None

    def reset(self, target=None, **row):
        self.total, self.target = 0, target
        return None

    def add(self, n: int) -> int:
        """Add to the counter.

        Args:
            n: how much to add
        """
        self.total += n
        return self.total

    def read(self) -> int:
        """The counter's value."""
        return self.total


class Broken(Counter):
    def add(self, n: int) -> int:
        """Add to the counter, badly.

        Args:
            n: how much to add
        """
        raise KeyError("no counter here")


class Python:
    """Runs the model's code in the sandbox; the answer is what it printed last."""

    def __init__(self):
        self.printed = ""

    async def python(self, code: str) -> str:
        """Run a Python program and return what it prints.

        Args:
            code: the program
        """
        self.printed = await run_python(code)
        return self.printed


def reached(completions, environments, target, **columns):
    """1 when the counter holds the task's target."""
    return [float(env.total == int(t)) for env, t in zip(environments, target)]


def printed(completions, environments, answer, **columns):
    return [float(env.printed.strip() == str(a)) for env, a in zip(environments, answer)]
