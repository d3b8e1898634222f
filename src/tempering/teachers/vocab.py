"""The start-up vocabulary check: teachers score the student's token ids directly, so every model
involved must map the same strings to the same ids over the whole vocabulary."""

from __future__ import annotations

from typing import Any

from tempering.errors import UserError


def vocab_diff(a: dict[str, int], b: dict[str, int], other: str = "the other") -> list[str]:
    """Human-readable differences between the student's token -> id map `a` and `other`'s `b` (empty when they agree)."""
    out = []
    for tok in sorted(set(a) | set(b), key=lambda t: (a.get(t, b.get(t, -1)), t)):
        ia, ib = a.get(tok), b.get(tok)
        if ia == ib:
            continue
        if ia is None:
            out.append(f"{tok!r} only in {other} (id {ib})")
        elif ib is None:
            out.append(f"{tok!r} only in the student (id {ia})")
        else:
            out.append(f"{tok!r} is id {ia} for the student, {ib} for {other}")
    return out


def check_vocab(student_tokenizer, others: dict[str, Any], show: int = 5) -> None:
    """Raise a `UserError` naming the differing tokens unless every tokenizer in `others` (name ->
    tokenizer) has exactly the student's vocabulary."""
    ref = student_tokenizer.get_vocab()
    for name, tok in others.items():
        diff = vocab_diff(ref, tok.get_vocab(), name)
        if diff:
            shown = "; ".join(diff[:show]) + (f"; and {len(diff) - show} more" if len(diff) > show else "")
            raise UserError(
                f"{name} does not share the student's vocabulary ({len(diff)} tokens differ: {shown}). "
                "Teachers score the student's token ids directly; use teachers and a reference built on the "
                "student's tokenizer (e.g. the same model family)"
            )
