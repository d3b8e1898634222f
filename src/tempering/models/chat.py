"""Turning prompts and environment feedback into tokens, with or without a chat template.

Token-in, token-out: the policy's own tokens are never re-tokenised; only the prompt and each
feedback message (or tool result) are encoded, and appended after what was sampled.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tempering.errors import UserError

_MARK = "\x00TEMPERING_ANSWER\x00"


PLAIN_TOOLS = (
    'Tools (JSON schemas):\n{tools}\nCall one as <tool_call>{{"name": NAME, "arguments": {{...}}}}</tool_call>; '
    "its result comes back in <tool_response></tool_response>.\n"
)
"""How a prompt offers its tools to a model without a chat template (the Hermes format, as text)."""

PLAIN_TOOL_RESULT = "\n<tool_response>\n{content}\n</tool_response>\n"
"""A tool result after an answer, for a model without a chat template."""


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
        tools = getattr(prompt, "tools", None)
        if tools is not None:
            kw["tools"] = tools
        return self.tokenizer.apply_chat_template(msgs, tokenize=False, **kw)

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

    def feedback_ids(self, feedback: str, prompt: str) -> list[int]:
        """Tokens between the end of the policy's answer and the start of its next answer."""
        shown = prompt.last_user_text if isinstance(prompt, Conversation) else prompt
        message = self.feedback_template.format(feedback=feedback, prompt=shown)
        if not self.use_chat_template:
            return self._encode(message)
        msgs = self._messages(prompt) + [{"role": "assistant", "content": _MARK}, {"role": "user", "content": message}]
        text = self.tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
        suffix = text.split(_MARK, 1)[1]
        eos = self.tokenizer.eos_token or ""
        if eos and suffix.startswith(eos):  # the answer's own end-of-turn token was sampled already
            suffix = suffix[len(eos) :]
        return self._encode(suffix)

    def reply_ids(self, messages: list[dict[str, Any]], prompt: str, answer_closed: bool = True) -> list[int]:
        """Tokens of the messages an environment answers with (tool results as `tool` messages), as the
        chat template renders them after an answer, up to the start of the next answer. `answer_closed`:
        the answer ended with its own end-of-turn token (not cut at the token limit), which the
        template's text then starts with and which is not repeated."""
        if not self.use_chat_template:
            return self._encode("".join(PLAIN_TOOL_RESULT.format(content=m["content"]) for m in messages))
        msgs = self._messages(prompt) + [{"role": "assistant", "content": _MARK}, *messages]
        suffix = self._render(msgs, prompt, add_generation_prompt=True).split(_MARK, 1)[1]
        eos = self.tokenizer.eos_token or ""
        if answer_closed and eos and suffix.startswith(eos):
            suffix = suffix[len(eos) :]
        return self._encode(suffix)
