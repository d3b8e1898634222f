"""Evaluation metrics over groups of episodes."""

from __future__ import annotations

from math import comb

from tempering.types import Episode, Group


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct (Chen et al., 2021)."""
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def group_metrics(groups: list[Group], k: int, max_turns: int = 1) -> dict[str, float]:
    """pass@1 / pass@k over groups of n samples, mean score, and cumulative accuracy by turn (Acc@t)."""
    if not groups:
        return {}
    n = len(groups[0].episodes)
    out: dict[str, float] = {}
    c = [sum(e.success for e in g.episodes) for g in groups]
    out["pass@1"] = sum(pass_at_k(n, ci, 1) for ci in c) / len(groups)
    if k > 1 and n >= k:
        out[f"pass@{k}"] = sum(pass_at_k(n, ci, k) for ci in c) / len(groups)
    eps = [e for g in groups for e in g.episodes]
    out["score"] = sum(e.reward for e in eps) / len(eps)
    if max_turns > 1:
        for t in range(1, max_turns + 1):
            out[f"acc@{t}"] = sum(e.first_success_turn is not None and e.first_success_turn <= t for e in eps) / len(
                eps
            )
        steps = [(a.score, b.score) for e in eps for a, b in zip(e.turns, e.turns[1:])]
        if steps:
            out["improve_rate"] = sum(b > a for a, b in steps) / len(steps)
            out["regress_rate"] = sum(b < a for a, b in steps) / len(steps)
        passed = [e for e in eps if e.success]
        if passed:
            turns = [e.first_success_turn for e in passed]  # never None: each of them passed a turn
            out["turns_per_pass"] = sum(t for t in turns if t is not None) / len(passed)
            out["tokens_per_pass"] = sum(e.num_action_tokens for e in passed) / len(passed)
    return out


def reward_parts(episodes: list[Episode]) -> dict[str, float]:
    """`reward/NAME`: the mean of each named part of the reward (a verifier's `info["rewards"]`, e.g.
    one value per reward function of a dataset) on the turn that gave each episode its reward; and,
    for tool-calling episodes, `tool_counts`; and `scorer_errors`, when a verifier raised on an answer."""
    sums: dict[str, list[float]] = {}
    for e in episodes:
        parts = e.turns[-1].info.get("rewards", {}) if e.turns else {}
        for name, v in parts.items():
            sums.setdefault(name, []).append(float(v))
    parts = {f"reward/{name}": sum(vs) / len(vs) for name, vs in sums.items()}
    return {
        **parts,
        **logged_metrics(episodes),
        **tool_counts(episodes),
        **scorer_errors(episodes),
        **rerendered(episodes),
    }


def logged_metrics(episodes: list[Episode]) -> dict[str, float]:
    """What reward functions logged with TRL's `log_metric(name, value)` (a turn's `info["metrics"]`),
    averaged over the step's answers, under the name they gave."""
    sums: dict[str, list[float]] = {}
    for e in episodes:
        for t in e.turns:
            for name, v in t.info.get("metrics", {}).items():
                sums.setdefault(name, []).append(float(v))
    return {name: sum(vs) / len(vs) for name, vs in sums.items()}


def scorer_errors(episodes: list[Episode]) -> dict[str, float]:
    """`scorer_errors`: answers a verifier could not score because its own scorer raised (a turn's
    `info["scorer_error"]`: the cause; such an answer scores 0 as unreadable); empty when none did."""
    n = sum("scorer_error" in t.info for e in episodes for t in e.turns)
    return {"scorer_errors": float(n)} if n else {}


TOOL_COUNTS = ("calls", "malformed")
"""Per-turn counters of tool environments (`info["tool_calls"]`, `info["tool_malformed"]`): calls run,
and calls refused as malformed (unreadable JSON, an unknown tool, bad arguments)."""


def tool_counts(episodes: list[Episode]) -> dict[str, float]:
    """`tools/calls`, `tools/malformed`: per episode, summed over its turns (mean over
    episodes), and `tools/episodes_with_calls`; empty when no episode was a tool episode."""
    tool_eps = [e for e in episodes if any("tool_calls" in t.info for t in e.turns)]
    if not tool_eps:
        return {}
    n = len(episodes)
    out = {f"tools/{k}": sum(t.info.get(f"tool_{k}", 0) for e in tool_eps for t in e.turns) / n for k in TOOL_COUNTS}
    out["tools/episodes_with_calls"] = sum(any(t.info.get("tool_calls", 0) for t in e.turns) for e in tool_eps) / n
    return out


RERENDERED = {"realign": "realigned", "fork": "forked", "dropped": "dropped"}
"""The kinds of re-rendered turn (`Turn.info["rerendered"]`, beside `clean`) and their metric names."""


def rerendered(episodes: list[Episode]) -> dict[str, float]:
    """With `rollout.turn_context=template`: the share of episodes where the chat template's re-rendering
    of the conversation realigned the training row (`rerender/realigned`), forked a new row
    (`rerender/forked`) or left older turns out to fit the context (`rerender/dropped`), and the tokens
    held that it rendered otherwise (`rerender/drift_tokens`, per episode); empty in other runs."""
    seen = [[t.info["rerendered"] for t in e.turns if "rerendered" in t.info] for e in episodes]
    if not any(seen):
        return {}
    n = len(episodes)
    out = {f"rerender/{name}": sum(k in s for s in seen) / n for k, name in RERENDERED.items()}
    out["rerender/drift_tokens"] = sum(t.info.get("drift_tokens", 0) for e in episodes for t in e.turns) / n
    return out
