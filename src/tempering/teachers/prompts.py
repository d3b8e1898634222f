"""Teacher prompts with privileged context, and scoring a batch of the student's episodes.

The student's prompt and the teacher's prompt are two functions of the same example (`Task`): a
teacher may see the reference answer, a hint or an annotation (`task.meta`) that the student never
sees, while both score the very same student tokens. A builder is any `Task -> str`; from a config it
is a template such as `"Hint: the answer is {answer}\\n{prompt}"`, or `"pkg.module:function"`.
A builder marked with `@sees_sample` is called as `build(task, episode)` instead: its context may
depend on the student's own sample (e.g. the reference answer nearest to it), so it is built per episode.
"""

from __future__ import annotations

import importlib
import re
import string
from collections.abc import Callable
from dataclasses import fields
from typing import Any, cast

import torch

from tempering.errors import UserError
from tempering.models.chat import ChatFormat
from tempering.teachers.align import aligned_scores, check_teacher_prompt
from tempering.teachers.base import Teacher, TeacherScores, place, take
from tempering.types import Episode, Task

PromptBuilder = Callable[[Task], str]
SampleBuilder = Callable[[Task, Episode], str]
"""A builder marked with `@sees_sample`: also given the episode."""
TEMPLATE_FIELDS = ("prompt", "answer", "family", "id", "difficulty", "meta")


def sees_sample(build: SampleBuilder) -> SampleBuilder:
    """Mark a teacher prompt builder as `(task, episode) -> str`: it reads the student's own sample
    (`episode.turns[k].info["text"]`), so its prompt is built for every episode, not once per task."""
    cast(Any, build).sees_sample = True  # a function attribute, which Callable does not declare
    return build


def same_prompt(task: Task) -> str:
    """The example's own prompt (no privileged context)."""
    return task.prompt


def template_builder(template: str) -> PromptBuilder:
    """A builder filling `{prompt}`, `{answer}`, `{family}`, `{id}`, `{difficulty}` and `{meta[key]}`."""
    try:
        names = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as e:
        raise UserError(
            f"prompt template {template!r} is malformed ({e}); write fields as {{prompt}}, {{answer}}, {{meta[key]}}"
        ) from None
    for f in names:
        root = f.split("[", 1)[0].split(".", 1)[0]
        if root not in TEMPLATE_FIELDS:
            raise UserError(
                f"prompt template {template!r} uses {{{f}}}; allowed fields: {', '.join(TEMPLATE_FIELDS)} (meta as {{meta[key]}})"
            )

    def build(task: Task) -> str:
        try:
            return template.format(
                prompt=task.prompt,
                answer=task.answer,
                family=task.family,
                id=task.id,
                difficulty=task.difficulty,
                meta=task.meta,
            )
        except (KeyError, IndexError) as e:
            raise UserError(f"prompt template {template!r}: task {task.id} has no {e} in its meta") from None

    build.__doc__ = f"Prompt from the template {template!r}."
    return build


def load_builder(spec: str | None) -> PromptBuilder:
    """`None` or `"{prompt}"`: the example's prompt; a string with `{...}` fields: a template;
    `"pkg.module:function"`: that function of the task."""
    if spec is None or spec == "{prompt}":
        return same_prompt
    if not re.fullmatch(r"[\w.]+:\w+", spec):
        return template_builder(spec)
    mod, _, fn = spec.partition(":")
    try:
        builder = getattr(importlib.import_module(mod), fn)
    except (ImportError, AttributeError) as e:
        raise UserError(
            f"prompt builder {spec!r} cannot be imported ({e}); give a template or 'pkg.module:function'"
        ) from None
    if not callable(builder):
        raise UserError(f"prompt builder {spec!r} is not callable")
    return builder


def requests(
    episodes: list[Episode],
    fmt: ChatFormat,
    build: PromptBuilder | None = None,
    raw: dict[str, Task] | None = None,
    teacher_fmt: ChatFormat | None = None,
    name: str = "teacher",
):
    """(teacher prompts, continuations, offsets) for a batch of episodes.

    The continuation is everything after the student's prompt (actions and feedback); the offset is
    the student's prompt length, i.e. where the continuation starts in a collated row. `raw` maps
    a task id to the example before the student's own prompt was applied (the teacher builds from it).
    `teacher_fmt`: a teacher with another tokenizer, whose prompts are rendered in its own format.
    """
    own = teacher_fmt or fmt
    render = (lambda p: check_teacher_prompt(name, teacher_fmt, p)) if teacher_fmt is not None else own.prompt_ids
    prompts, conts, offsets = [], [], []
    cache: dict[str, list[int]] = {}
    for e in episodes:
        rows = e.segments()
        if len(rows) != 1:
            raise UserError(
                "teachers score whole episodes; this one was split where old turns left the context "
                "(set rollout.drop_old_turns=false, or a larger rollout.max_context_tokens)"
            )
        ids = rows[0][0]
        n = len(e.prompt_ids)
        if build is None:
            tp = list(e.prompt_ids) if teacher_fmt is None else render(e.prompt)
        elif getattr(build, "sees_sample", False):
            tp = render(cast(SampleBuilder, build)((raw or {}).get(e.task.id, e.task), e))
        else:
            if e.task.id not in cache:
                cache[e.task.id] = render(build((raw or {}).get(e.task.id, e.task)))
            tp = cache[e.task.id]
        prompts.append(tp)
        conts.append(ids[n:])
        offsets.append(n)
    return prompts, conts, offsets


def score_episodes(
    teacher: Teacher,
    episodes: list[Episode],
    fmt: ChatFormat,
    T: int,
    build: PromptBuilder | None = None,
    raw: dict[str, Task] | None = None,
    candidates_BTK: torch.Tensor | None = None,
    top_k: int = 0,
    full: bool = False,
    teacher_fmt: ChatFormat | None = None,
) -> TeacherScores:
    """Score collated episodes; every tensor comes back aligned with the batch: (B, T, ...), where
    position t holds the score of token t given tokens < t (0 outside the continuations).
    `teacher_fmt`: the teacher has another tokenizer (`teachers.align`): its prompts are rendered in
    that format and its scores aligned to the student's tokens by text spans (token log-probs only)."""
    prompts, conts, offsets = requests(episodes, fmt, build, raw, teacher_fmt, teacher.name)
    if teacher_fmt is not None:
        if candidates_BTK is not None or top_k or full:
            raise UserError(
                f"{teacher.name} has another tokenizer than the student: only the log-probs of the student's "
                "tokens can be aligned (by text spans), not candidates, top-k or whole distributions"
            )
        return aligned_scores(teacher, episodes, prompts, offsets, fmt, teacher_fmt, T)
    C = max((len(c) for c in conts), default=0)
    cand = None if candidates_BTK is None else take(candidates_BTK, offsets, C)
    s = teacher.score(prompts, conts, cand, top_k=top_k, full=full)
    # the two required fields are tensors in `s`, so they stay tensors
    placed: dict[str, Any] = {
        f.name: (None if getattr(s, f.name) is None else place(getattr(s, f.name), offsets, T)) for f in fields(s)
    }
    return TeacherScores(**placed)
