"""OpenReward environments in the `openreward` SDK's own form, served by the SDK's own `Server`: sums to
answer through a `submit` tool (reward 1 for the right total, finished) and a `hint` tool (no reward, the
episode goes on); `sumsplain` takes the answer as plain text through its `@terminal` tool. Run as
`python ors_sums.py PORT` to serve both on 127.0.0.1."""

from __future__ import annotations

import sys

from openreward.environments import Environment, JSONObject, Server, TextBlock, ToolOutput, terminal, tool
from pydantic import BaseModel

TASKS = {
    split: [{"id": f"{split}-{i}", "a": 3 * i + k, "b": 7 + 2 * i + k} for i in range(12)]
    for split, k in (("train", 0), ("test", 100))
}


class Answer(BaseModel):
    total: int


class Nothing(BaseModel):
    pass


class Sums(Environment):
    """Add two numbers; the submit tool grades the answer."""

    def __init__(self, task_spec: JSONObject, secrets: dict[str, str] | None = None):
        super().__init__(task_spec, secrets or {})
        self.a, self.b = int(task_spec["a"]), int(task_spec["b"])

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train", "test"]

    @classmethod
    def list_tasks(cls, split: str) -> list[JSONObject]:
        return TASKS[split]

    def get_prompt(self):
        return [TextBlock(text=f"What is {self.a}+{self.b}? Call submit with the total.")]

    @tool
    async def hint(self, params: Nothing) -> ToolOutput:
        """A hint: the last digit of the total."""
        return ToolOutput(blocks=[TextBlock(text=f"it ends in {(self.a + self.b) % 10}")], reward=0.0)

    @tool
    async def submit(self, params: Answer) -> ToolOutput:
        """Submit the total; this ends the episode."""
        right = params.total == self.a + self.b
        return ToolOutput(blocks=[TextBlock(text="correct" if right else "wrong")], reward=float(right), finished=True)


class Reply(BaseModel):
    message: str


class SumsPlain(Sums):
    """The same sums, answered in plain text: the answer's last number is the total."""

    def get_prompt(self):
        return [TextBlock(text=f"What is {self.a}+{self.b}? Answer with the number.")]

    @terminal
    @tool
    async def answer(self, params: Reply) -> ToolOutput:
        """The final answer (the harness routes a plain reply here)."""
        numbers = [w for w in params.message.replace(".", " ").split() if w.lstrip("-").isdigit()]
        right = bool(numbers) and int(numbers[-1]) == self.a + self.b
        return ToolOutput(blocks=[TextBlock(text="correct" if right else "wrong")], reward=float(right), finished=True)


if __name__ == "__main__":
    Server([Sums, SumsPlain]).run(host="127.0.0.1", port=int(sys.argv[1]))
