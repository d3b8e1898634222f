import asyncio

import pytest

from tempering.envs.gui.env import FEEDBACK_TEMPLATE
from tempering.models.chat import ChatFormat
from tempering.rollout.engine import RolloutOptions, rollout
from tempering.rollout.sampler import Sample, SamplingParams


class ByteTokenizer:
    """Lossless bytes: a scripted policy reads exactly the context the engine built."""

    eos_token_id = 256
    eos_token = None

    def encode(self, text, add_special_tokens=False):
        return list(text.encode())

    def decode(self, ids, skip_special_tokens=True):
        return bytes(i for i in ids if i < 256).decode()


class TextSampler:
    """Answers each context with `answer(decoded context)`; records the contexts it was given."""

    def __init__(self, answer):
        self.tokenizer, self.answer, self.contexts = ByteTokenizer(), answer, []

    def sample(self, contexts, params):
        out = []
        for ctx in contexts:
            text = self.tokenizer.decode(ctx)
            self.contexts.append(text)
            ids = self.tokenizer.encode(self.answer(text)) + [ByteTokenizer.eos_token_id]
            out.append(Sample(ids, [-0.1] * len(ids), False))
        return out


@pytest.fixture
def text_rollout():
    """`run(answer, tasks, make_env, max_turns)` -> (groups, sampler): episodes through the rollout engine
    with the GUI feedback template, a policy that answers from the decoded context, scores checked in [0, 1]."""

    def run(answer, tasks, make_env, max_turns, template=FEEDBACK_TEMPLATE):
        sampler = TextSampler(answer)
        fmt = ChatFormat(sampler.tokenizer, use_chat_template=False, feedback_template=template)
        opts = RolloutOptions(
            sampling=SamplingParams(max_new_tokens=512),
            max_turns=max_turns,
            max_context_tokens=1 << 16,
            score_range=(0.0, 1.0),
        )
        return asyncio.run(rollout(sampler, fmt, tasks, make_env, 1, opts)), sampler

    return run
