"""The `tool_drift` part of benchmarks/ecosystem.py: how often a chat template, re-rendering a tool
episode's conversation (`rollout.turn_context=template`, what a chat server feeds the model), writes the
turns so far otherwise than the tokens sampled, and whether the training row then realigns or forks.

- sampled: SmolLM2-135M-Instruct (the packaged model) runs tool episodes on the `Desk` tools
  (benchmarks/ecosystem_tools.py) through the rollout engine, up to 3 turns, with its own chat template
  and `model.tool_prompt=system` (its template ignores `tools=`). The small model never opens a call by
  itself, so each answer is begun with `<tool_call>` and `{"name": "` (its tokens, as the tokenizer
  writes them) and the model writes the rest; the tools run, malformed calls get `error:` replies, and
  the episode goes on.
- replayed: the same answers (their token ids) replayed through the same environment under TRL's copies
  of the Qwen2.5 and Qwen3 chat templates (Qwen3 with thinking on and off) and TRL's prefix-preserving
  training variant of Qwen3, with SmolLM2's tokenizer.

For each: the episodes that reached a second turn, those with a realigned or forked row
(`fork_threshold_tokens` 1024, TRL's default), the answer tokens a realignment turned into context, and
every episode's rows checked against the tokens sampled in their contexts (`check_rows`, run by the
engine on every episode: a failure stops the benchmark).
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path
from typing import Any

from ecosystem_tools import PREFILL, Desk, desk_reward

from tempering.envs.tools import ToolFamily
from tempering.models.chat import ChatFormat
from tempering.rollout.engine import RolloutOptions, rollout
from tempering.rollout.sampler import Sample, SamplingParams

ASKS = ["Add {k} to the total.", "Search the notes for {w}.", "Turn on the flag {w}.", "Add {k}, then search for {w}."]
TEMPLATES = {  # label -> (TRL's template file, or None for the model's own; template variables)
    "smollm2 (own; tools in the system message)": (None, {}),
    "qwen2_5": ("qwen2_5", {}),
    "qwen3 (thinking)": ("qwen3", {}),
    "qwen3 (enable_thinking=false)": ("qwen3", {"enable_thinking": False}),
    "qwen3_training (thinking)": ("qwen3_training", {}),
    "qwen3_training (enable_thinking=false)": ("qwen3_training", {"enable_thinking": False}),
}


class Prefilled:
    """A sampler whose every answer begins with given tokens: they are sampled as written (log-prob 0)
    and the model continues them."""

    def __init__(self, inner, prefill: list[int]):
        self.inner, self.prefill, self.tokenizer = inner, prefill, inner.tokenizer
        self.in_process = getattr(inner, "in_process", False)

    def sample(self, contexts, params):
        out = self.inner.sample([list(c) + self.prefill for c in contexts], params)
        return [Sample(self.prefill + s.ids, [0.0] * len(self.prefill) + s.logprobs, s.truncated) for s in out]


class Replay:
    """Gives each episode's recorded answers in order (one episode per rollout)."""

    def __init__(self, tokenizer, answers: list[Sample]):
        self.tokenizer, self.answers, self.turn = tokenizer, answers, 0

    def sample(self, contexts, params):
        (ctx,) = contexts
        s = self.answers[self.turn]
        self.turn += 1
        return [s]


def _rows(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.randint(1, 30)
        ask = rng.choice(ASKS).format(k=k, w=rng.choice(["lunch", "tax", "dark mode", "bugs"]))
        out.append({"prompt": ask, "target": k})
    return out


def _count(groups) -> dict[str, Any]:
    eps = [e for g in groups for e in g.episodes]
    later = [e for e in eps if len(e.turns) > 1]
    kinds = lambda e: [t.info.get("rerendered") for t in e.turns]
    lost = sum(t.info.get("drift_tokens", 0) for e in eps for t in e.turns if t.info.get("rerendered") == "realign")
    return {
        "episodes": len(eps),
        "with_a_later_turn": len(later),
        "realigned": sum("realign" in kinds(e) for e in eps),
        "forked": sum("fork" in kinds(e) for e in eps),
        "clean_turns": sum(k == "clean" for e in eps for k in kinds(e)),
        "realigned_turns": sum(k == "realign" for e in eps for k in kinds(e)),
        "forked_turns": sum(k == "fork" for e in eps for k in kinds(e)),
        "answer_tokens_made_context": lost,
    }


def measure(n: int = 24, seed: int = 0, max_new_tokens: int = 40) -> dict[str, Any]:
    import trl

    from tempering.models import load_policy
    from tempering.rollout.sampler import HFSampler

    model, tok = load_policy("smollm2-135m-instruct")
    own = tok.chat_template
    fam = ToolFamily(Desk, _rows(n, seed), desk_reward, heldout_share=0.0)
    tasks = fam.tasks("train", n)
    opts = RolloutOptions(
        sampling=SamplingParams(max_new_tokens=max_new_tokens, temperature=1.0),
        max_turns=3,
        max_context_tokens=2048,
        turn_context="template",
        fork_threshold_tokens=1024,
    )
    fmt = ChatFormat(tok, tool_prompt="system")
    sampler = Prefilled(HFSampler(model, tok, seed=seed), tok.encode(PREFILL, add_special_tokens=False))
    t0 = time.perf_counter()
    groups = asyncio.run(rollout(sampler, fmt, tasks, fam.make_env, 1, opts))
    seconds = time.perf_counter() - t0
    answers = {g.task.id: [Sample(t.action_ids, t.logprobs, t.truncated) for t in g.episodes[0].turns] for g in groups}
    per: dict[str, Any] = {}
    folder = Path(trl.__file__).parent / "chat_templates"
    for label, (name, variables) in TEMPLATES.items():
        tok.chat_template = own if name is None else (folder / f"{name}.jinja").read_text()
        f = ChatFormat(tok, tool_prompt="system" if name is None else "template", template_kwargs=variables)
        replayed = []
        for task in tasks:
            replayed += asyncio.run(rollout(Replay(tok, answers[task.id]), f, [task], fam.make_env, 1, opts))
        per[label] = _count(replayed)
    sampled = _count(groups)
    # without the prefill: does the model open a call by itself when it sees the tool block?
    first = HFSampler(model, tok, seed=seed + 1).sample(
        [fmt.prompt_ids(t.prompt) for t in tasks], SamplingParams(max_new_tokens=max_new_tokens, temperature=1.0)
    )
    opened = sum("<tool_call>" in tok.decode(s.ids, skip_special_tokens=True) for s in first)
    return {
        "episodes": sampled["episodes"],
        "realigned": sampled["realigned"],
        "forked": sampled["forked"],
        "sampled": {**sampled, "model": "smollm2-135m-instruct", "seconds": round(seconds, 1)},
        "templates": per,
        "max_turns": opts.max_turns,
        "max_new_tokens": max_new_tokens,
        "fork_threshold_tokens": opts.fork_threshold_tokens,
        "prefill": PREFILL,
        "seed": seed,
        "unprefilled_answers": len(first),
        "unprefilled_answers_with_a_call": opened,
    }


def render(d: dict[str, Any]) -> list[str]:
    s = d["sampled"]
    lines = [
        "## tool_drift (tool episodes re-rendered by the chat template)",
        "",
        f"SmolLM2-135M-Instruct ran {s['episodes']} tool episodes (up to {d['max_turns']} turns, {d['max_new_tokens']} "
        f"new tokens, temperature 1, each answer begun with `{d['prefill']!r}`) with `rollout.turn_context=template`, "
        f"its own chat template and the tools in the system message ({s['seconds']} s). Its answers were then replayed "
        "under TRL's copies of other chat templates, with SmolLM2's tokenizer. Every episode's training rows were "
        "checked against the tokens sampled in their contexts; `rollout.turn_context=tokens` (the default) never "
        "re-renders, so it has none of these by construction.",
        "",
        f"Without the prefill, with the tools in its system message, SmolLM2-135M-Instruct opened a `<tool_call>` in "
        f"{d['unprefilled_answers_with_a_call']} of {d['unprefilled_answers']} first answers (temperature 1); under "
        "its own template without `model.tool_prompt=system`, tempering refuses the run (the template drops `tools=`).",
        "",
        "| template | episodes | reached a 2nd turn | realigned | forked | turns clean / realigned / forked | answer tokens made context |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for label, c in {"sampled: " + next(iter(d["templates"])): s, **d["templates"]}.items():
        lines.append(
            f"| {label} | {c['episodes']} | {c['with_a_later_turn']} | {c['realigned']} | {c['forked']} | "
            f"{c['clean_turns']} / {c['realigned_turns']} / {c['forked_turns']} | {c['answer_tokens_made_context']} |"
        )
    return [*lines, ""]
