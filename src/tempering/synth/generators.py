"""Generators turn (seed, action) into a candidate: an LLM behind an OpenAI-compatible chat endpoint,
or the built-in deterministic mutators.

The LLM gets the generation prompt (prompts/generate.md: the seed as JSON, its pass rate, the action,
predicted pass rate, frontier score, edit mask and skill contract) and answers with the whole bundle as
one JSON object. A repair continues the same conversation with prompts/repair.md and the failure.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from dataclasses import dataclass
from importlib import resources
from string import Template
from typing import Any, Protocol

from pydantic import Field

from tempering.config import Schema
from tempering.envs.terminal.bundle import Bundle, BundleFormatError
from tempering.errors import UserError
from tempering.http import ServerError, request_json
from tempering.synth.scoring import Action
from tempering.synth.seeds import BundleSeed, Seed, SkillContract, skill_taxonomy

ACTION_TEXT = {
    "increase/in_depth": "make the task harder within the seed's own skills (more steps, stricter rules, more edge cases)",
    "increase/in_breadth": "make the task harder by adding a requirement that exercises another skill",
    "reduce/in_depth": "make the task easier within the same skills (fewer steps, simpler rules)",
    "reduce/in_breadth": "make the task easier by stripping secondary systems and replacing live dependencies by fixtures",
    "diversify/in_depth": "write a different task of the same difficulty in the same skills",
    "diversify/in_breadth": "write a different task of the same difficulty in another scenario or skill",
}


@dataclass
class Request:
    """Everything a generator is told about one attempt."""

    seed: Seed
    """The seed to act on."""
    action: Action
    """The chosen action."""
    pass_rate: float
    """Measured pass rate of the seed."""
    predicted: float
    """Predicted pass rate after the action."""
    score: float
    """Frontier score of the prediction."""
    contract: SkillContract
    """Skills the result must / may exercise."""
    tau: float = 0.5
    """Target pass rate."""
    salt: int = 0
    """Attempt counter, so that deterministic generators draw new data on a retry."""
    failure: str | None = None
    """Why the previous attempt was rejected (a repair), or None (a first attempt)."""
    previous: str | None = None
    """The previous answer's raw text (for an LLM repair)."""


@dataclass
class Generation:
    """A generator's answer."""

    candidate: Any = None
    """The new seed-like object, or None when the answer could not be used."""
    error: str = ""
    """Why there is no candidate (malformed JSON, missing keys, no mutator)."""
    tokens: int = 0
    """Prompt + completion tokens spent (0 for built-in mutators)."""
    tokens_estimated: bool = False
    """The endpoint reported no usage, so tokens were estimated as characters / 4."""
    raw: str = ""
    """The answer text (for the repair conversation)."""


class Generator(Protocol):
    name: str

    def fits(self, seed: Seed) -> bool:
        """Whether this generator can act on the seed at all (mutator present, prompt within budget)."""

    async def generate(self, req: Request) -> Generation: ...


class MutatorGenerator:
    """Built-in deterministic mutators: the action is a parameter move of the seed's family."""

    name = "mutators"

    def fits(self, seed: Seed) -> bool:
        return getattr(seed, "has_mutator", True)

    async def generate(self, req: Request) -> Generation:
        try:
            return Generation(req.seed.mutate(req.action, salt=req.salt))
        except (NotImplementedError, ValueError) as e:
            return Generation(None, str(e))


# -- the OpenAI-compatible chat client ------------------------------------------------------------------
class EndpointError(UserError):
    """The chat endpoint cannot be used (unreachable, refused the key, broken answers)."""


class ChatConfig(Schema):
    """Where and how to call the chat endpoint."""

    base_url: str = Field(
        "http://127.0.0.1:8000/v1", description="Endpoint root; requests go to {base_url}/chat/completions."
    )
    model: str = Field("default", description="Model name sent with each request.")
    api_key_env: str = Field(
        "OPENAI_API_KEY", description="Environment variable holding the key (sent as a bearer token when set)."
    )
    temperature: float = Field(0.7, description="Sampling temperature.")
    max_tokens: int = Field(8192, gt=0, description="Completion token limit.")
    timeout_s: float = Field(300.0, gt=0, description="Seconds to wait for one answer.")
    retries: int = Field(2, ge=0, description="Extra tries after HTTP 429 / 5xx answers.")
    json_mode: bool = Field(
        False, description='Send response_format={"type": "json_object"} (servers that support it).'
    )


class ChatClient:
    """Minimal client of POST {base_url}/chat/completions."""

    def __init__(self, cfg: ChatConfig):
        self.cfg = cfg

    def complete(self, messages: list[dict[str, str]]) -> tuple[str, int | None]:
        """(answer text, prompt + completion tokens or None when the server reports no usage)."""
        cfg = self.cfg
        body = {"model": cfg.model, "messages": messages, "temperature": cfg.temperature, "max_tokens": cfg.max_tokens}
        if cfg.json_mode:
            body["response_format"] = {"type": "json_object"}
        url = cfg.base_url.rstrip("/") + "/chat/completions"
        try:
            data = request_json(
                "POST", url, body, timeout_s=cfg.timeout_s, api_key=os.environ.get(cfg.api_key_env), retries=cfg.retries
            )
        except ServerError as e:
            if e.kind == "status" and e.status in (401, 403):
                raise EndpointError(
                    f"the endpoint {url} refused the request (HTTP {e.status}); set the key in ${cfg.api_key_env}"
                ) from None
            if e.kind == "status":
                raise EndpointError(f"the endpoint {url} answered HTTP {e.status}: {e.body!r}") from None
            if e.kind == "not_json":
                raise EndpointError(
                    f"the endpoint {url} did not answer in the chat-completions format: {e.body!r}"
                ) from None
            raise EndpointError(
                f"cannot reach the generator endpoint {url} ({e.reason}); start the server or fix --base-url"
            ) from None
        try:
            text = data["choices"][0]["message"]["content"] or ""
        except (KeyError, IndexError, TypeError):
            raise EndpointError(
                f"the endpoint {url} did not answer in the chat-completions format: {json.dumps(data)[:300]!r}"
            ) from None
        usage = data.get("usage") or {}
        tokens = None
        if "total_tokens" in usage or "prompt_tokens" in usage:
            tokens = int(usage.get("total_tokens") or usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0))
        return text, tokens


def parse_bundle_answer(text: str) -> Bundle:
    """The bundle in an answer: the whole text, a ```json fence, or the outermost {...}."""
    candidates = [text.strip()]
    fence = re.search(r"```(?:json)?\s*(\{.*\})\s*```", text, re.S)
    if fence:
        candidates.append(fence.group(1))
    if "{" in text and "}" in text:
        candidates.append(text[text.index("{") : text.rindex("}") + 1])
    err = None
    for c in candidates:
        try:
            obj = json.loads(c)
        except json.JSONDecodeError as e:
            err = e
            continue
        return Bundle.from_json(obj)
    raise BundleFormatError(f"the answer is not one JSON object ({err}); answer with the JSON object only")


class LLMGenerator:
    """Generation and repair through an OpenAI-compatible chat endpoint."""

    name = "llm"

    def __init__(self, cfg: ChatConfig, prompt_budget_chars: int = 60_000):
        self.client = ChatClient(cfg)
        self.prompt_budget_chars = prompt_budget_chars
        self.generate_tpl = Template(resources.files("tempering.synth").joinpath("prompts/generate.md").read_text())
        self.repair_tpl = Template(resources.files("tempering.synth").joinpath("prompts/repair.md").read_text())

    def prompt(self, req: Request) -> str:
        seed = req.seed.bundle if isinstance(req.seed, BundleSeed) else req.seed
        seed_json = json.dumps(seed.to_json(), indent=1) if isinstance(seed, Bundle) else repr(seed)
        return self.generate_tpl.substitute(
            pass_rate=f"{req.pass_rate:.3f}",
            seed_json=seed_json,
            action=req.action.name,
            action_text=ACTION_TEXT[req.action.name],
            predicted=f"{req.predicted:.3f}",
            score=f"{req.score:.3f}",
            tau=f"{req.tau:.2f}",
            edit_mask=", ".join(sorted(req.action.edit_mask)),
            required=", ".join(sorted(req.contract.required)),
            optional=", ".join(sorted(req.contract.optional)),
            taxonomy=", ".join(skill_taxonomy()),
        )

    def fits(self, seed: Seed) -> bool:
        bundle = getattr(seed, "bundle", None)
        return bundle is not None and len(json.dumps(bundle.to_json())) <= self.prompt_budget_chars

    async def generate(self, req: Request) -> Generation:
        messages = [{"role": "user", "content": self.prompt(req)}]
        if req.failure is not None:
            messages += [
                {"role": "assistant", "content": req.previous or ""},
                {"role": "user", "content": self.repair_tpl.substitute(failure=req.failure)},
            ]
        text, tokens = await asyncio.to_thread(self.client.complete, messages)
        estimated = tokens is None
        if tokens is None:
            tokens = (sum(len(m["content"]) for m in messages) + len(text)) // 4
        try:
            bundle = parse_bundle_answer(text)
        except BundleFormatError as e:
            return Generation(None, str(e), tokens, estimated, text)
        bundle.config.metadata.update({"parent": req.seed.name, "action": req.action.name})
        return Generation(BundleSeed(bundle), "", tokens, estimated, text)
