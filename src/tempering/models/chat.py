"""Turning prompts and environment feedback into tokens, with or without a chat template.

Token-in, token-out: the policy's own tokens are never re-tokenised; only the prompt and each
feedback message are encoded, and appended after what was sampled.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tempering.errors import UserError

_MARK = "\x00TEMPERING_ANSWER\x00"


class Conversation(str):
    """A chat prompt (TRL's conversational format): a list of `{"role", "content"}` messages. As text it
    is their JSON (what logs and sample files show, and what makes two prompts equal), so it goes
    wherever a prompt goes; `ChatFormat` renders its `messages` with the chat template."""

    messages: list[dict[str, Any]]

    def __new__(cls, messages: list[dict[str, Any]]):
        s = super().__new__(cls, json.dumps(messages, ensure_ascii=False))
        s.messages = messages
        return s

    def __getnewargs__(self):  # type: ignore[override]  # pickles and copies rebuild it from its messages
        return (self.messages,)

    @property
    def last_user_text(self) -> str:
        return next((str(m["content"]) for m in reversed(self.messages) if m["role"] == "user"), "")


@dataclass
class ChatFormat:
    tokenizer: object
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

    def prompt_ids(self, prompt: str) -> list[int]:
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
            text = self.tokenizer.apply_chat_template(msgs, continue_final_message=True, tokenize=False)
        else:
            text = self.tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
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
