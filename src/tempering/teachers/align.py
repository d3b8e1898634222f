"""Teachers with another tokenizer than the student's: scores aligned by text spans.

The student's answer is decoded to text and the teacher tokenizes that text. A span ends wherever both
tokenizations have a token boundary (where the two tokenizers agree on a split: GOLD's byte-offset
alignment in TRL, here on characters). Over a span, the chain rule gives each model's exact log-prob of
the same text, the sum of its token log-probs there; no vocabulary mapping is needed. The span's
reverse-KL term log pT(span) - log pS(span) is shared equally among the student's tokens in it: each
token's "teacher log-prob" is its own log-prob plus that share. So an answer's terms add up to
log pT(y) - log pS(y), as with a shared tokenizer, and every credit that reads a teacher's per-token
log-probs (OPD's reverse KL, TU-OPD's weighted sum and consensus) runs unchanged; on a span of one token
each (the same tokenizer) it is exactly the per-token reverse KL. A closed answer's end-of-turn token
is a span of its own on both sides (the teacher's own end-of-turn token), so the teacher also says when
to stop.

Whole next-token distributions cannot be compared across vocabularies this way (ULD compares them
sorted, which drops which token is which); the distribution losses need a teacher on the student's
tokenizer.

Each model reads the prompt in its own format: the teacher's prompt is rendered with the teacher's own
chat template (or as plain text when it has none and the prompt is text), and in multi-turn episodes
every environment reply is rendered in the teacher's format between the answers.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

import torch

from tempering.errors import UserError
from tempering.models.chat import ChatFormat, Conversation
from tempering.teachers.base import Teacher, TeacherScores, place
from tempering.types import Episode


def same_vocab(student_tokenizer, teacher_tokenizer) -> bool:
    return student_tokenizer.get_vocab() == teacher_tokenizer.get_vocab()


def teacher_format(name: str, teacher: Teacher, student: ChatFormat) -> ChatFormat | None:
    """The format a teacher with another vocabulary reads its prompts in (its own chat template, when it
    has one), or None when it shares the student's vocabulary and scores the student's ids directly."""
    if same_vocab(student.tokenizer, teacher.tokenizer):
        return None
    if getattr(teacher.tokenizer, "is_fast", True) is False:
        raise UserError(
            f"teacher {name!r} has another tokenizer than the student and it is not a fast (Rust) tokenizer, "
            "which text-span alignment decodes token by token: give the teacher a tokenizer.json"
        )
    return ChatFormat(teacher.tokenizer, None, student.feedback_template, student.system_prompt, student.tool_prompt)


def check_teacher_prompt(name: str, fmt: ChatFormat, prompt: str) -> list[int]:
    """A teacher's prompt ids in its own format; one line naming the teacher when its tokenizer has no
    chat template for a prompt that needs one (chat messages or tools)."""
    if isinstance(prompt, Conversation) and prompt.tools is None and not fmt.use_chat_template:
        raise UserError(
            f"teacher {name!r} has no chat template, and the prompts are chat messages, which it cannot read in "
            "its own format: use a teacher whose tokenizer has a chat template, or text prompts"
        )
    return fmt.prompt_ids(prompt)


def token_ends(tokenizer, ids: list[int], skip_special: bool = True) -> tuple[str, list[int]]:
    """The text of `ids` and the character offset where each token ends in it.

    Decoded incrementally from a short window (as streaming detokenisers do), so a token that ends
    inside a character (byte-level BPE) gets the offset of the character's end, like the token that
    completes it. A decoder that is not incremental is decoded whole, prefix by prefix.
    """
    dec = lambda xs: tokenizer.decode(xs, skip_special_tokens=skip_special, clean_up_tokenization_spaces=False)
    text, ends, start, read = "", [], 0, 0
    pending = 0
    for i in range(len(ids)):
        before, now = dec(ids[start:read]), dec(ids[start : i + 1])
        pending += 1
        if len(now) >= len(before) and now.startswith(before) and not now.endswith("\ufffd"):
            text += now[len(before) :]
            ends += [len(text)] * pending
            pending, start, read = 0, read, i + 1
    if pending:
        text += dec(ids[start:])[len(dec(ids[start:read])) :]
        ends += [len(text)] * pending
    full = dec(ids)
    if text == full:
        return text, ends
    ends = []
    for i in range(len(ids)):
        prefix = dec(ids[: i + 1])
        ends.append(len(prefix) if full.startswith(prefix) else -1)
    for i in range(len(ends) - 1, -1, -1):  # a token that ends nowhere in the text ends with the next one
        if ends[i] < 0:
            ends[i] = ends[i + 1] if i + 1 < len(ends) else len(full)
    return full, ends


def encode_text(tokenizer, text: str) -> tuple[list[int], list[int]]:
    """A teacher's tokens of `text` and where each ends in it. Special-token strings inside the text are
    read as text. Where the tokenizer cannot write the text back exactly (characters outside its
    vocabulary), the boundaries after the first difference are dropped: the rest is one span."""
    ids = list(tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"])
    own, ends = token_ends(tokenizer, ids, skip_special=False)  # an unknown character shows as <unk>
    if own != text:
        same = next((k for k, (a, b) in enumerate(zip(own, text)) if a != b), min(len(own), len(text)))
        ends = [e if e <= same else len(text) for e in ends]
    return ids, ends


def spans(student_ends: list[int], teacher_ends: list[int], length: int) -> tuple[list[int], list[int], int]:
    """The span of each student and teacher token, and the number of spans: a span closes at every
    offset where tokens of both end (and at the end of the text)."""
    common = sorted((set(student_ends) & set(teacher_ends)) | {length})
    where = lambda e: bisect.bisect_left(common, e)
    return [where(e) for e in student_ends], [where(e) for e in teacher_ends], len(common)


@dataclass
class Piece:
    """A stretch of an episode's continuation: an answer (aligned by spans) or an environment reply
    (the student's and the teacher's renderings of the same messages; no credit there)."""

    student: int
    """How many student tokens it covers."""
    teacher: list[int]
    """The teacher's tokens of it."""
    student_span: list[int] | None = None
    teacher_span: list[int] | None = None
    spans: int = 0


def _answer(student_tok, turn_ids: list[int], truncated: bool, stop: int | None, teacher_tok) -> Piece:
    special = set(student_tok.all_special_ids)
    closed = bool(turn_ids) and not truncated and turn_ids[-1] in special and stop is not None
    body = turn_ids[:-1] if closed else turn_ids
    text, s_ends = token_ends(student_tok, body)
    t_ids, t_ends = encode_text(teacher_tok, text)
    s_span, t_span, n = spans(s_ends, t_ends, len(text))
    if closed:  # the end-of-turn tokens: a span of their own
        assert stop is not None
        s_span, t_span, t_ids, n = s_span + [n], t_span + [n], t_ids + [stop], n + 1
    return Piece(len(turn_ids), t_ids, s_span, t_span, n)


def _pieces(e: Episode, student: ChatFormat, teacher: ChatFormat, stop: int | None) -> list[Piece]:
    out = []
    for k, t in enumerate(e.turns):
        if t.realign:
            raise UserError(
                "a teacher with another tokenizer scores an episode as its answers and the environment's replies, "
                "and this one was re-rendered by the chat template (rollout.turn_context=template); use "
                "rollout.turn_context=tokens"
            )
        out.append(_answer(student.tokenizer, t.action_ids, t.truncated, stop, teacher.tokenizer))
        if t.feedback_ids:
            if t.reply is None:
                raise UserError(
                    "a teacher with another tokenizer renders each environment reply in its own format, and turn "
                    f"{k + 1} of an episode of task {e.task.id!r} kept none"
                )
            out.append(Piece(len(t.feedback_ids), teacher.reply_ids(t.reply, e.prompt, answer_closed=not t.truncated)))
    return out


def aligned_scores(
    teacher: Teacher,
    episodes: list[Episode],
    prompts: list[list[int]],
    offsets: list[int],
    student: ChatFormat,
    fmt: ChatFormat,
    T: int,
) -> TeacherScores:
    """Score collated episodes with a teacher of another tokenizer: `prompts` are the teacher's own
    prompt ids; every value comes back on the student's batch positions (B, T), as `score_episodes`
    gives them."""
    stop = fmt.end_of_answer_id()
    pieces = []
    for e in episodes:
        if len(e.segments()) != 1:
            raise UserError(
                "teachers score whole episodes; this one was split where old turns left the context "
                "(set rollout.drop_old_turns=false, or a larger rollout.max_context_tokens)"
            )
        pieces.append(_pieces(e, student, fmt, stop))
    conts = [[i for p in ps for i in p.teacher] for ps in pieces]
    s = teacher.score(prompts, conts)
    C = max((sum(p.student for p in ps) for ps in pieces), default=0)
    values, mask = torch.zeros(len(episodes), C), torch.zeros(len(episodes), C)
    for b, (e, ps) in enumerate(zip(episodes, pieces)):
        logp = [x for t in e.turns for x in (t.logprobs + [0.0] * len(t.feedback_ids))]
        at_s = at_t = 0
        for p in ps:
            if p.student_span is not None:
                assert p.teacher_span is not None
                mine = torch.tensor(logp[at_s : at_s + p.student], dtype=torch.float32)
                theirs = s.token_logp_BC[b, at_t : at_t + len(p.teacher)].float()
                values[b, at_s : at_s + p.student] = spread(mine, theirs, p.student_span, p.teacher_span, p.spans)
                mask[b, at_s : at_s + p.student] = 1.0
            at_s, at_t = at_s + p.student, at_t + len(p.teacher)
    return TeacherScores(token_logp_BC=place(values, offsets, T), mask_BC=place(mask, offsets, T))


def spread(
    student_logp: torch.Tensor, teacher_logp: torch.Tensor, student_span: list[int], teacher_span: list[int], n: int
) -> torch.Tensor:
    """Per student token: its own log-prob plus an equal share of its span's log pT - log pS. A span
    without teacher tokens (student tokens that decode to nothing) gets no share."""
    s_idx, t_idx = torch.tensor(student_span, dtype=torch.long), torch.tensor(teacher_span, dtype=torch.long)
    t_sum = torch.zeros(n).index_add_(0, t_idx, teacher_logp)
    s_sum = torch.zeros(n).index_add_(0, s_idx, student_logp)
    count = torch.bincount(s_idx, minlength=n).float()
    has_teacher = torch.bincount(t_idx, minlength=n) > 0
    share = torch.where(has_teacher, (t_sum - s_sum) / count.clamp(min=1), torch.zeros(n))
    return student_logp + share[s_idx]


def describe_alignment(student_tok, teacher_tok, ids: list[int]) -> dict[str, Any]:
    """How an answer's tokens fall into spans (what the results pages report): spans, and tokens per
    span on either side."""
    text, s_ends = token_ends(student_tok, ids)
    t_ids, t_ends = encode_text(teacher_tok, text)
    _, _, n = spans(s_ends, t_ends, len(text))
    return {"spans": n, "student_tokens": len(ids), "teacher_tokens": len(t_ids)}
