"""Turning prompts and environment feedback into tokens, with or without a chat template.

Token-in, token-out: the policy's own tokens are never re-tokenised; only the prompt and each
feedback message (or tool result) are encoded, and appended after what was sampled.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from tempering.errors import UserError

_MARK = "\x00TEMPERING_ANSWER\x00"


PLAIN_TOOLS = (
    'Tools (JSON schemas):\n{tools}\nCall one as <tool_call>{{"name": NAME, "arguments": {{...}}}}</tool_call>; '
    "its result comes back in <tool_response></tool_response>.\n"
)
"""How a prompt offers its tools to a model without a chat template (the Hermes format, as text)."""

PLAIN_TOOL_RESULT = "\n<tool_response>\n{content}\n</tool_response>\n"
"""A tool result after an answer, for a model without a chat template."""

SYSTEM_TOOLS = (
    "You may call the tools below. Their JSON schemas:\n<tools>\n{tools}\n</tools>\n"
    'To call one, write <tool_call>{{"name": NAME, "arguments": {{...}}}}</tool_call> (one tag per call); '
    "each result comes back as a tool message."
)
"""The tool block `model.tool_prompt=system` writes into the system message (Hermes' format), for chat
templates that do not render `tools=` themselves."""


class Conversation(str):
    """A chat prompt (TRL's conversational format): a list of `{"role", "content"}` messages, and the
    tools (JSON schemas) it offers, if any. As text it is their JSON (what logs and sample files show,
    and what makes two prompts equal), so it goes wherever a prompt goes; `ChatFormat` renders its
    `messages` with the chat template, passing the tools as `tools=`."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None

    def __new__(cls, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None):
        shown = messages if tools is None else {"messages": messages, "tools": tools}
        s = super().__new__(cls, json.dumps(shown, ensure_ascii=False))
        s.messages, s.tools = messages, tools
        return s

    def __getnewargs__(self):  # pickles and copies rebuild it from its messages
        return (self.messages, self.tools)

    @property
    def last_user_text(self) -> str:
        return next((str(m["content"]) for m in reversed(self.messages) if m["role"] == "user"), "")


@dataclass
class ChatFormat:
    tokenizer: Any
    """A Hugging Face tokenizer, or anything with its `encode`, `apply_chat_template` and `eos_token`."""
    use_chat_template: bool | None = None
    """Apply the tokenizer's chat template (None: when the tokenizer has one)."""
    feedback_template: str = "\n{feedback}\n{prompt}"
    """Text appended after a failed answer: `{feedback}` and the task's `{prompt}` are filled in."""
    system_prompt: str | None = None
    tool_prompt: Literal["template", "system"] = "template"
    """Where a prompt's tools go: `template` (the chat template renders `tools=`; a template that leaves
    any tool out of the prompt is refused) or `system` (`SYSTEM_TOOLS` in the system message)."""

    template_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra variables of the chat template (e.g. Qwen3's `enable_thinking`), on every rendering."""
    _shown: set[str] = field(default_factory=set, repr=False, compare=False)
    """The tool lists (as JSON) whose rendering was checked already."""

    def __post_init__(self):
        if self.use_chat_template is None:
            self.use_chat_template = bool(getattr(self.tokenizer, "chat_template", None))

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _messages(self, prompt: str) -> list[dict]:
        """The prompt's messages: a conversation's own (the system prompt first, unless it has its own
        system message), or one user message."""
        own = list(prompt.messages) if isinstance(prompt, Conversation) else [{"role": "user", "content": prompt}]
        has_system = any(m["role"] == "system" for m in own)
        sys = [{"role": "system", "content": self.system_prompt}] if self.system_prompt and not has_system else []
        return sys + own

    def _render(self, msgs: list[dict], prompt: str, **kw) -> str:
        kw = {**self.template_kwargs, **kw}
        tools = getattr(prompt, "tools", None)
        if tools is None:
            return self.tokenizer.apply_chat_template(msgs, tokenize=False, **kw)
        if self.tool_prompt == "system":
            return self.tokenizer.apply_chat_template(with_tool_block(msgs, tools), tokenize=False, **kw)
        text = self.tokenizer.apply_chat_template(msgs, tokenize=False, tools=tools, **kw)
        key = json.dumps(tools, sort_keys=True)
        if key not in self._shown:
            check_tools_shown(text, self.tokenizer.apply_chat_template(msgs, tokenize=False, **kw), tools)
            self._shown.add(key)
        return text

    def prompt_ids(self, prompt: str) -> list[int]:
        if getattr(prompt, "tools", None) is not None and not self.use_chat_template:
            # no chat template to render the tools: they go before the messages as text
            own = "\n".join(str(m["content"]) for m in self._messages(prompt))
            shown = "\n".join(json.dumps(t, ensure_ascii=False) for t in prompt.tools)  # type: ignore[attr-defined]
            return self._encode(PLAIN_TOOLS.format(tools=shown) + own)
        if isinstance(prompt, Conversation) and not self.use_chat_template:
            raise UserError(
                "the prompts are chat messages (TRL's conversational format) and "
                + (
                    "model.use_chat_template is false"
                    if getattr(self.tokenizer, "chat_template", None)
                    else "the model's tokenizer has no chat template"
                )
                + ": use a model with a chat template (an instruct model), or give the prompts as text"
            )
        if not self.use_chat_template:
            return self._encode(prompt)
        msgs = self._messages(prompt)
        if msgs[-1]["role"] == "assistant":  # a started answer (TRL: the model continues it)
            text = self._render(msgs, prompt, continue_final_message=True)
        else:
            text = self._render(msgs, prompt, add_generation_prompt=True)
        return self._encode(text)

    def feedback_message(self, feedback: str, prompt: str) -> dict[str, Any]:
        """The user message a failed answer gets: `feedback_template` around the status message."""
        shown = prompt.last_user_text if isinstance(prompt, Conversation) else prompt
        return {"role": "user", "content": self.feedback_template.format(feedback=feedback, prompt=shown)}

    def feedback_ids(self, feedback: str, prompt: str) -> list[int]:
        """Tokens between the end of the policy's (closed) answer and the start of its next answer."""
        return self.reply_ids([self.feedback_message(feedback, prompt)], prompt)

    def reply_ids(self, messages: list[dict[str, Any]], prompt: str, answer_closed: bool = True) -> list[int]:
        """Tokens of the messages an environment answers with (tool results as `tool` messages, feedback
        as a user message), as the chat template renders them after an answer, up to the start of the
        next answer. `answer_closed`: the answer ended with its own end-of-turn token (not cut at the
        token limit), which the template's text then starts with and which is not repeated."""
        if not self.use_chat_template:
            return self._encode("".join(_plain_reply(m) for m in messages))
        msgs = self._messages(prompt) + [{"role": "assistant", "content": _MARK}, *messages]
        suffix = self._render(msgs, prompt, add_generation_prompt=True).split(_MARK, 1)[1]
        eos = self.tokenizer.eos_token or ""
        if answer_closed and eos and suffix.startswith(eos):
            suffix = suffix[len(eos) :]
        return self._encode(suffix)

    def conversation_ids(self, prompt: str, exchanges: list[tuple[str, list[dict[str, Any]]]]) -> list[int]:
        """The whole conversation as the chat template renders it, ready for the next answer: the prompt,
        then each (answer text, the environment's reply messages). What a chat server would feed the
        model, which re-renders earlier turns as its template writes them."""
        if not self.use_chat_template:
            raise UserError("a conversation is re-rendered by a chat template, and this model has none")
        msgs = self._messages(prompt)
        for answer, reply in exchanges:
            msgs += [{"role": "assistant", "content": answer}, *reply]
        return self._encode(self._render(msgs, prompt, add_generation_prompt=True))

    def end_of_answer_id(self) -> int | None:
        """The token that ends an answer: the first one the chat template writes after an assistant
        message, or the tokenizer's EOS."""
        if self.use_chat_template:
            msgs = [{"role": "user", "content": "x"}, {"role": "assistant", "content": _MARK}]
            after = self._render(msgs, "").split(_MARK, 1)[1]
            ids = self._encode(after) if after.strip() else []
            if ids:
                return ids[0]
        return self.tokenizer.eos_token_id


def _plain_reply(message: dict[str, Any]) -> str:
    """A reply message as text, for a model without a chat template: tool results in Hermes' tags."""
    if message["role"] == "tool":
        return PLAIN_TOOL_RESULT.format(content=message["content"])
    return str(message["content"])


def with_tool_block(msgs: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages with `SYSTEM_TOOLS` at the end of the system message (a new one when there is none)."""
    block = SYSTEM_TOOLS.format(tools="\n".join(json.dumps(t, ensure_ascii=False) for t in tools))
    if msgs and msgs[0]["role"] == "system":
        return [{**msgs[0], "content": f"{msgs[0]['content']}\n\n{block}"}, *msgs[1:]]
    return [{"role": "system", "content": block}, *msgs]


def check_tools_shown(with_tools: str, without: str, tools: list[dict[str, Any]]) -> None:
    """Refuse a rendering that leaves a tool out: each tool's name and argument names must appear more
    often in the prompt rendered with `tools=` than without (a template that ignores `tools=` renders
    both alike, and the model would be trained to call tools it never saw)."""
    for t in tools:
        fn = t.get("function", t)
        names = [fn["name"], *fn.get("parameters", {}).get("properties", {})]
        missing = [n for n in names if with_tools.count(n) <= without.count(n)]
        if missing:
            what = (
                f"tool {fn['name']!r}"
                if missing[0] == fn["name"]
                else f"argument {missing[0]!r} of tool {fn['name']!r}"
            )
            raise UserError(
                f"the model's chat template does not show the tools it is given (tools=): the {what} is not in "
                "the rendered prompt, so the model would be trained to call tools it never saw. Set "
                "model.tool_prompt=system (tempering writes the tools' schemas into the system message, Hermes' "
                "format; docs/ecosystem.md), or model.chat_template=FILE (a Jinja template that renders tools)"
            )
