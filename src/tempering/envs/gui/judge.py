"""Plan judges for the macro reward: the rule-based matcher (default, offline) or an LLM judge behind
an OpenAI-compatible chat endpoint (`POST {base_url}/chat/completions`).

The LLM judge asks for one score on the scale 0, 0.3, 0.5, 0.8, 1. A reply without a usable score
falls back to the rule-based score for that sample (counted in `fallbacks`); an endpoint that cannot
be reached is an error naming the address, since every later call would fail the same way.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from tempering.envs.gui.reward import PlanJudge, parse_judge_score, plan_match
from tempering.errors import UserError
from tempering.http import ServerError, request_json

JUDGE_PROMPT = """You grade the plan of a GUI agent.
Task: {instruction}
Reference subtasks still to do: {reference}
Agent's subtasks: {predicted}
How well does the agent's plan match the reference (same steps, nothing missing, nothing wrong)?
Reply with one number only, from: 0, 0.3, 0.5, 0.8, 1."""


@dataclass
class JudgeConfig:
    """Which plan judge scores the macro reward."""

    kind: str = "rule"
    """`rule` (offline plan matcher) or `llm` (chat endpoint)."""
    base_url: str = "http://127.0.0.1:8000/v1"
    """OpenAI-compatible endpoint (for `llm`)."""
    model: str = "judge"
    """Model name sent to the endpoint."""
    api_key_env: str = "OPENAI_API_KEY"
    """Environment variable holding the API key (may be unset for local servers)."""
    timeout_s: float = 30.0
    """Seconds to wait for one reply."""


@dataclass
class LLMJudge:
    """Plan judge that asks a chat model; see the module docstring for failure handling."""

    base_url: str
    model: str
    api_key: str | None = None
    timeout_s: float = 30.0
    fallback: PlanJudge = plan_match
    """Scores a sample whose reply holds no usable score."""
    calls: int = field(default=0, init=False)
    fallbacks: int = field(default=0, init=False)

    def ask(self, prompt: str) -> str:
        messages = [{"role": "user", "content": prompt}]
        body = {"model": self.model, "messages": messages, "temperature": 0.0, "max_tokens": 8}
        url = self.base_url.rstrip("/") + "/chat/completions"
        try:
            reply = request_json("POST", url, body, timeout_s=self.timeout_s, api_key=self.api_key)
        except ServerError as e:
            # a hiccup: the fallback scores it (a `status` error always carries its status)
            if e.kind == "not_json" or (e.kind == "status" and e.status is not None and e.status >= 500):
                return ""
            if e.kind == "status":
                raise UserError(
                    f"plan judge at {url} answered HTTP {e.status}; check judge.base_url, judge.model and the API key"
                ) from e
            raise UserError(
                f"plan judge at {url} cannot be reached ({e.reason}); start the server or set judge.kind=rule"
            ) from e
        try:
            return str(reply["choices"][0]["message"]["content"] or "")
        except (KeyError, IndexError, TypeError):
            return ""

    def __call__(self, predicted: list[str], reference: list[str], instruction: str = "") -> float:
        self.calls += 1
        prompt = JUDGE_PROMPT.format(
            instruction=instruction,
            reference="; ".join(reference) or "(none)",
            predicted="; ".join(predicted) or "(none)",
        )
        score = parse_judge_score(self.ask(prompt))
        if score is None:
            self.fallbacks += 1
            return self.fallback(predicted, reference, instruction)
        return score


def make_judge(cfg: JudgeConfig | None = None) -> PlanJudge:
    cfg = cfg or JudgeConfig()
    if cfg.kind == "rule":
        return plan_match
    if cfg.kind == "llm":
        return LLMJudge(cfg.base_url, cfg.model, os.environ.get(cfg.api_key_env), cfg.timeout_s)
    raise UserError(f"judge.kind must be 'rule' or 'llm', got {cfg.kind!r}")
