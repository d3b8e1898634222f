"""A verifiers 0.4.0 taskset in the package's own form: sums, scored by three weighted rewards."""

import verifiers.v1 as vf


class SumData(vf.TaskData):
    answer: str


class SumTask(vf.Task[SumData]):
    @vf.reward(weight=1.0)
    async def correct(self, task, trace) -> float:
        return float(trace.last_reply == task.answer)

    @vf.reward(weight=0.5)
    async def digits(self, task, trace) -> float:
        """Partial credit: the share of digits in the right place."""
        got = trace.last_reply
        return sum(a == b for a, b in zip(got, task.answer)) / max(len(got), len(task.answer), 1)

    @vf.reward(weight=-0.1, priority=1)
    async def style(self, trace):
        """Keyed scores: one reward per key, each with this function's weight."""
        reply = trace.last_reply
        return {"length": min(len(reply), 10) / 10, "spaces": float(" " in reply)}


class SumConfig(vf.TasksetConfig):
    n: int = 200
    system: str | None = None


class SumTaskset(vf.Taskset[SumTask, SumConfig]):
    def load(self):
        for i in range(self.config.n):
            a, b = 10 + i % 23, 3 + i // 23
            yield SumTask(
                SumData(prompt=f"{a}+{b}=", answer=str(a + b), system_prompt=self.config.system), self.config.task
            )


__all__ = ["SumTaskset"]


def load_environment(n: int = 200, system: str | None = None):
    """The package's own loader, as its eval command builds the environment."""
    return vf.load_environment(vf.resolve_env_config({"taskset": {"id": "vf_sums", "n": n, "system": system}}))
