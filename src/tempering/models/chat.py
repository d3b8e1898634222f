"""Turning prompts and environment feedback into tokens, with or without a chat template.

Token-in, token-out: the policy's own tokens are never re-tokenised; only the prompt and each
feedback message are encoded, and appended after what was sampled.
"""

from __future__ import annotations

from dataclasses import dataclass

_MARK = "\x00TEMPERING_ANSWER\x00"


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
        sys = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return sys + [{"role": "user", "content": prompt}]

    def prompt_ids(self, prompt: str) -> list[int]:
        if not self.use_chat_template:
            return self._encode(prompt)
        text = self.tokenizer.apply_chat_template(self._messages(prompt), add_generation_prompt=True, tokenize=False)
        return self._encode(text)

    def feedback_ids(self, feedback: str, prompt: str) -> list[int]:
        """Tokens between the end of the policy's answer and the start of its next answer."""
        message = self.feedback_template.format(feedback=feedback, prompt=prompt)
        if not self.use_chat_template:
            return self._encode(message)
        msgs = self._messages(prompt) + [{"role": "assistant", "content": _MARK}, {"role": "user", "content": message}]
        text = self.tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
        suffix = text.split(_MARK, 1)[1]
        eos = self.tokenizer.eos_token or ""
        if eos and suffix.startswith(eos):  # the answer's own end-of-turn token was sampled already
            suffix = suffix[len(eos) :]
        return self._encode(suffix)
