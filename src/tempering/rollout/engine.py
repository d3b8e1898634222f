"""The rollout engine: single- and multi-turn episodes, generated in batches.

Every turn, all live episodes of all groups are sampled together (in chunks of the sampler's batch
size, in a worker thread); each chunk's answers go to their environments as soon as it is sampled,
so verification overlaps with generating the next chunk. Failed episodes get the environment's
templated feedback appended and continue until success, the turn limit K or the context limit.
Single-turn is K = 1.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import os
import random
import string
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from tempering.envs.base import SAMPLED_IDS, Env, StepResult
from tempering.errors import UserError
from tempering.models.chat import ChatFormat
from tempering.rollout.sampler import SamplingParams
from tempering.types import Episode, Group, StopReason, Task, Turn, common_prefix

FEEDBACK_TEMPLATES: dict[str, str] = {
    "parse_error": "unreadable: {feedback}",
    "compile_error": "compile error: {feedback}",
    "runtime_error": "runtime error: {feedback}",
    "incorrect": "wrong: {feedback}",
    "correct": "correct: {feedback}",
    "default": "{feedback}",
}
"""Feedback message per verifier status; `{feedback}` and the step's info keys are filled in (those the
task family allows: `TaskFamily.feedback_keys`, checked by `check_feedback_templates`)."""


@dataclass
class CounterfactualOptions:
    """TCPO's selective fixed-history counterfactual: resample the most surprising turns."""

    turns: int = 10
    """L: turns of the batch that get alternatives."""
    samples: int = 4
    """M: alternatives per selected turn."""
    select: str = "surprisal"
    """`surprisal` (mean token NLL of the turn, highest first) or `random` (the ablation)."""
    seed: int = 0


@dataclass
class RolloutOptions:
    sampling: SamplingParams = field(default_factory=SamplingParams)
    max_turns: int = 1
    """Turn limit K (1 = single-turn)."""
    max_context_tokens: int = 1024
    """Context window of the policy; see `drop_old_turns`."""
    drop_old_turns: bool = True
    """When the context fills, drop the oldest turns (keeping the prompt); otherwise stop the episode."""
    feedback_templates: dict[str, str] = field(default_factory=lambda: dict(FEEDBACK_TEMPLATES))
    continue_after_turn1: Callable[[Group], list[bool]] | None = None
    """Which episodes of a group may take more turns after turn 1 (LEAP's pruning); None: all failed ones."""
    score_range: tuple[float, float] | None = None
    """Required range of verifier scores (TCPO needs [0, 1]); None: any."""
    clamp_scores: bool = False
    """Clamp out-of-range scores instead of failing."""
    truncate_prompts: bool = False
    """A first observation longer than the context budget keeps its last tokens (otherwise: an error)."""
    counterfactual: CounterfactualOptions | None = None
    turn_context: str = "tokens"
    """How a later turn's context is made: `tokens` (the previous context, the answer's sampled ids and the
    environment's reply as the chat template renders it after an answer: exact by construction) or
    `template` (the whole conversation re-rendered by the chat template, what a chat server would feed
    the model; where that differs from the tokens held, the training row realigns or forks)."""
    fork_threshold_tokens: int = 1024
    """`template`: a re-rendering that differs only inside the last answer, by fewer tokens than this,
    realigns the row (those answer tokens become context); a larger or earlier difference forks a new row."""
    greedy_baseline: bool = False
    """One more episode per group at temperature 0, scored and kept apart (`Group.greedy`): ReMax's baseline."""

    def plain(self, temperature: float | None = None) -> RolloutOptions:
        """These options without what a training method adds (pruning, counterfactuals, greedy baselines),
        at `temperature` if given: what evaluation and baselines sample with."""
        sampling = self.sampling if temperature is None else replace(self.sampling, temperature=temperature)
        return replace(self, sampling=sampling, continue_after_turn1=None, counterfactual=None, greedy_baseline=False)


@dataclass
class RolloutStats:
    env_calls: int = 0
    env_seconds: float = 0.0
    gen_seconds: float = 0.0
    env_errors: int = 0
    tokens: int = 0
    errors: list[EnvError] = field(default_factory=list)
    """The exceptions environments raised (one per `env_error` episode)."""
    groups_expanded: int = 0
    """Groups with a turn-1 failure whose failed episodes got more turns."""
    groups_pruned: int = 0
    """Groups with a turn-1 failure that LEAP's pruning stopped after turn 1."""
    episodes_pruned: int = 0
    cf_env_calls: int = 0
    cf_tokens: int = 0
    cf_seconds: float = 0.0
    greedy_env_calls: int = 0
    """Environment calls of the greedy baseline episodes (`RolloutOptions.greedy_baseline`)."""
    greedy_tokens: int = 0
    greedy_seconds: float = 0.0
    wall_seconds: float = 0.0


class _Defaults(dict):
    def __missing__(self, key):
        return "{" + key + "}"


def check_feedback_templates(templates: Mapping[str, str], allowed: frozenset[str] | None, family: str) -> None:
    """Refuse a template that names a field outside `{feedback}` and the family's `allowed` info keys
    (None: any key)."""
    if allowed is None:
        return
    for status, template in templates.items():
        try:
            unknown = sorted(_fields(template) - allowed - {"feedback"})
        except ValueError as e:
            raise UserError(f"rollout.feedback_templates.{status} is not a format string ({e})") from None
        if unknown:
            raise UserError(
                f"rollout.feedback_templates.{status} names {{{unknown[0]}}}, which task family {family!r} does not "
                f"let feedback show; allowed: {', '.join(sorted(allowed | {'feedback'}))}"
            )


def _fields(template: str) -> set[str]:
    """The names a format string reads, those inside format specs (`{a:{b}}`) included."""
    names = set()
    for _, name, spec, _ in string.Formatter().parse(template):
        if name:
            names.add(name.split(".")[0].split("[")[0])
        if spec:
            names |= _fields(spec)
    return names


def format_feedback(templates: dict[str, str], res: StepResult) -> str:
    template = templates.get(res.status, templates.get("default", "{feedback}"))
    return template.format_map(_Defaults(res.info, feedback=res.feedback))


@dataclass
class EnvError:
    """An exception an environment (or user code it calls, such as a reward function) raised in `step`."""

    kind: str
    """The exception's type (the cause's, when it wraps one)."""
    message: str
    where: str
    """The innermost frame outside tempering: the user's code that raised."""
    task_id: str

    def describe(self) -> str:
        return f"{self.message} (task {self.task_id!r}; raised at {self.where})"


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _user_frame(e: BaseException) -> str:
    """`file:line in function` of the innermost frame outside tempering and the standard library, over
    the exception and its causes (a reward function's error is wrapped by the family that called it)."""
    chain: list[BaseException] = []
    cur: BaseException | None = e
    while cur is not None and cur not in chain:
        chain.append(cur)
        cur = cur.__cause__ or cur.__context__
    for exc in chain:  # a location an error names itself (a reward function's `def` line)
        if isinstance(getattr(exc, "where", None), str):
            return exc.where  # type: ignore[attr-defined]
    for exc in reversed(chain):  # the original cause first
        for f in reversed(traceback.extract_tb(exc.__traceback__)):
            path = os.path.abspath(f.filename)
            if not path.startswith(_PACKAGE) and "asyncio" not in path and "concurrent" not in path:
                return f"{f.filename}:{f.lineno} in {f.name}: {(f.line or '').strip()}"
    frames = traceback.extract_tb(chain[-1].__traceback__)
    return f"{frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name}" if frames else "?"


async def _step(env: Env, text: str, ids: list[int] | None = None) -> tuple[StepResult, float, EnvError | None]:
    """Verify one answer (`ids`: its sampled tokens, which reward functions get as TRL's `completion_ids`).
    An exception ends the episode as `env_error` and is returned as a record: the loop counts these,
    shows the first of each kind and stops a run whose error share is too high."""
    SAMPLED_IDS.set(ids)  # this coroutine runs as a task of its own: the value is its alone
    t0 = time.perf_counter()
    try:
        return await env.step(text), time.perf_counter() - t0, None
    except Exception as e:
        cause = e.__cause__ or e
        err = EnvError(type(cause).__name__, f"{type(e).__name__}: {e}", _user_frame(e), env.task.id)
        res = StepResult(score=0.0, success=False, done=True, status="env_error", info={"error": err.message})
        return res, time.perf_counter() - t0, err


def fit_prompt(ids: list[int], task_id: str, opts: RolloutOptions) -> list[int]:
    """The prompt's tokens if an answer still fits the context after them; its last tokens with
    `truncate_prompts`; otherwise an error naming the task."""
    budget = opts.max_context_tokens - opts.sampling.max_new_tokens
    if len(ids) <= budget:
        return ids
    if opts.truncate_prompts and budget > 0:
        return ids[-budget:]
    raise UserError(
        f"the prompt of task {task_id!r} is {len(ids)} tokens, and with an answer of rollout.max_new_tokens="
        f"{opts.sampling.max_new_tokens} it does not fit rollout.max_context_tokens={opts.max_context_tokens}: "
        "raise max_context_tokens (up to the model's context), shorten the prompt, or set "
        "rollout.truncate_prompts=true (keeps the prompt's last tokens)"
    )


async def _reset(env: Env) -> str:
    """The episode's first observation: what `reset()` returns (a coroutine for slow environments)."""
    obs = env.reset()
    if inspect.isawaitable(obs):
        obs = await obs
    if not isinstance(obs, str):
        raise UserError(
            f"{type(env).__name__}.reset() returned {type(obs).__name__}; it must return the first observation as text"
        )
    return obs


def _check_score(res: StepResult, env: Env, opts: RolloutOptions) -> float:
    if not isinstance(res.score, (int, float)) or not math.isfinite(res.score):
        raise UserError(
            f"verifier {type(env).__name__} returned score {res.score!r} for task {env.task.id!r}; scores must be "
            "finite numbers (a NaN or inf would reach the weights): fix the verifier or reward function"
        )
    if opts.score_range is None:
        return res.score
    lo, hi = opts.score_range
    if lo <= res.score <= hi:
        return res.score
    if opts.clamp_scores:
        return min(max(res.score, lo), hi)
    raise UserError(
        f"verifier {type(env).__name__} returned score {res.score} for task {env.task.id!r}, outside [{lo}, {hi}]; "
        "fix the verifier or set rollout.clamp_scores=true"
    )


async def _sample_and_verify(
    sampler, contexts: list[list[int]], envs: list[Env], params: SamplingParams, stats: RolloutStats
):
    """Sample in chunks and verify each chunk as soon as it exists. A sampler that computes in this process
    (`in_process`, e.g. `HFSampler`) runs on this thread, where the update runs too: torch work on a second
    thread gives OpenMP a second thread team, and once its threads outnumber the cores every team waits
    less efficiently (`benchmarks/grpo_vs_trl.py` measures the cost). Its chunks are then verified after the last
    one, as the loop is busy sampling. Other samplers (a server, remote workers) wait off the event loop."""
    chunk = getattr(sampler, "max_batch", len(contexts)) or len(contexts)
    here = getattr(sampler, "in_process", False)
    samples, texts, futures = [], [], []
    for i in range(0, len(contexts), chunk):
        t0 = time.perf_counter()
        if here:
            part = sampler.sample(contexts[i : i + chunk], params)
        else:
            part = await asyncio.to_thread(sampler.sample, contexts[i : i + chunk], params)
        stats.gen_seconds += time.perf_counter() - t0
        part_texts = [sampler.tokenizer.decode(s.ids, skip_special_tokens=True) for s in part]
        futures += [
            asyncio.ensure_future(_step(env, t, list(s.ids)))
            for env, t, s in zip(envs[i : i + chunk], part_texts, part)
        ]
        samples += part
        texts += part_texts
    return samples, texts, await asyncio.gather(*futures)


def _fit_context(prompt: list[int], turns: list[Turn], limit: int) -> list[int] | None:
    """Prompt + the most recent whole turns that fit in `limit` tokens (None if not even the last fits)."""
    ctx: list[int] = []
    for t in reversed(turns):
        piece = t.action_ids + t.feedback_ids
        if len(prompt) + len(ctx) + len(piece) > limit:
            break
        ctx = piece + ctx
    if not ctx:
        return None
    return prompt + ctx


async def rollout(
    sampler,
    fmt: ChatFormat,
    tasks: list[Task],
    make_env: Callable[[Task], Env],
    group_size: int,
    opts: RolloutOptions,
    stats: RolloutStats | None = None,
) -> list[Group]:
    """G episodes for each task; returns one Group per task."""
    stats = stats if stats is not None else RolloutStats()
    t_start = time.perf_counter()
    groups: list[Group] = []
    ctx: dict[int, list[int]] = {}
    turn_ctx: dict[tuple[int, int], list[int]] = {}
    envs: dict[int, Env] = {}
    eps: list[Episode] = []
    made = [(task, make_env(task)) for task in tasks for _ in range(group_size)]
    try:
        observations = await asyncio.gather(*(_reset(env) for _, env in made))
    except BaseException:  # give back what the others hold (browsers, sandboxes), then fail
        await asyncio.gather(*(env.close() for _, env in made), return_exceptions=True)
        raise
    encoded: dict[str, list[int]] = {}
    for i, ((task, env), obs) in enumerate(zip(made, observations)):
        if i % group_size == 0:
            groups.append(Group(task=task, episodes=[]))
        if obs not in encoded:  # the episodes of a group usually start from the same observation
            encoded[obs] = fit_prompt(fmt.prompt_ids(obs), task.id, opts)
        e = Episode(task=task, prompt_ids=list(encoded[obs]), prompt=obs)
        envs[id(e)], ctx[id(e)] = env, list(encoded[obs])
        groups[-1].episodes.append(e)
        eps.append(e)

    live = list(eps)
    pending_context: dict[int, list[int]] = {}
    realign: set[int] = set()
    replies: dict[int, list[dict] | None] = {}
    """Each live episode's last tool messages (None: the feedback template answers)."""
    budget = opts.max_context_tokens - opts.sampling.max_new_tokens
    for k in range(1, opts.max_turns + 1):
        if not live:
            break
        for e in live:
            turn_ctx[(id(e), k - 1)] = ctx[id(e)]
        samples, texts, results = await _sample_and_verify(
            sampler, [ctx[id(e)] for e in live], [envs[id(e)] for e in live], opts.sampling, stats
        )
        stats.env_calls += len(live)
        for e, s, text, (res, secs, err) in zip(live, samples, texts, results):
            stats.env_seconds += secs
            if err is not None:
                stats.errors.append(err)
            stats.tokens += len(s.ids)
            replies[id(e)] = res.messages
            score = _check_score(res, envs[id(e)], opts)
            e.turns.append(
                Turn(
                    action_ids=s.ids,
                    logprobs=s.logprobs,
                    score=score,
                    success=res.success,
                    status=res.status,
                    feedback=res.feedback,
                    truncated=s.truncated,
                    info=dict(res.info, text=text, env_seconds=secs),
                    context_ids=pending_context.pop(id(e), None),
                    realign=id(e) in realign,
                )
            )
            realign.discard(id(e))
            if res.status == "env_error":
                stats.env_errors += 1
                e.stop_reason = StopReason.ENV_ERROR
            elif res.success:
                e.stop_reason = StopReason.SUCCESS
            elif res.done:
                e.stop_reason = StopReason.DONE
            elif k == opts.max_turns:
                e.stop_reason = StopReason.MAX_TURNS
        if k == 1 and opts.max_turns > 1:
            for g in groups:  # which groups with a turn-1 failure get more turns
                failed = [e for e in g.episodes if not e.stop_reason]
                keep = (
                    opts.continue_after_turn1(g) if opts.continue_after_turn1 is not None else [True] * len(g.episodes)
                )
                cut = [e for e, ok in zip(g.episodes, keep) if not e.stop_reason and not ok]
                for e in cut:
                    e.stop_reason = StopReason.PRUNED
                g.info.update(turn1_failures=len(failed), expanded=bool(failed) and len(cut) < len(failed))
                if failed:
                    stats.groups_expanded += len(cut) < len(failed)
                    stats.groups_pruned += len(cut) == len(failed)
                stats.episodes_pruned += len(cut)
        nxt = []
        for e in live:
            if e.stop_reason:
                continue
            last = e.turns[-1]
            reply = replies.get(id(e))
            if reply is None:
                reply = [fmt.feedback_message(format_feedback(opts.feedback_templates, _as_result(last)), e.prompt)]
            last.reply = reply
            if opts.turn_context == "template":
                context = _rerendered(e, fmt, ctx[id(e)], opts, budget)
                if context is None:
                    e.stop_reason = StopReason.CONTEXT
                    continue
                ctx[id(e)], kind = context
                if kind == "clean":  # the row goes on with the template's tokens after the answer
                    last.feedback_ids = ctx[id(e)][len(turn_ctx[(id(e), k - 1)]) + len(last.action_ids) :]
                else:
                    pending_context[id(e)] = ctx[id(e)]
                    if kind == "realign":
                        realign.add(id(e))
                nxt.append(e)
                continue
            last.feedback_ids = fmt.reply_ids(reply, e.prompt, answer_closed=not last.truncated)
            grown = ctx[id(e)] + last.action_ids + last.feedback_ids
            if len(grown) <= budget:
                ctx[id(e)] = grown
            else:
                fitted = _fit_context(e.prompt_ids, e.turns, budget) if opts.drop_old_turns else None
                if fitted is None:
                    last.feedback_ids = []
                    e.stop_reason = StopReason.CONTEXT
                    continue
                ctx[id(e)] = pending_context[id(e)] = fitted
            nxt.append(e)
        live = nxt

    for e in eps:
        e.reward = e.turns[-1].score if e.turns else 0.0
        check_rows(e, [turn_ctx[(id(e), k)] for k in range(len(e.turns))])
    if opts.counterfactual is not None and opts.counterfactual.turns > 0:
        await _counterfactual(sampler, eps, turn_ctx, make_env, opts, stats)
    await asyncio.gather(*(env.close() for env in envs.values()))
    if opts.greedy_baseline:
        await _greedy(sampler, fmt, groups, make_env, opts, stats)
    stats.wall_seconds += time.perf_counter() - t_start
    return groups


def _rerendered(
    e: Episode, fmt: ChatFormat, context: list[int], opts: RolloutOptions, budget: int
) -> tuple[list[int], str] | None:
    """The next turn's context as the chat template renders the whole conversation, and how it relates to
    the tokens held (the last turn's context and its answer): `clean` (they are its prefix), `realign`
    (they part inside the last answer, by fewer than `fork_threshold_tokens`), `fork` (otherwise), or
    `dropped` (older turns left out to fit the context window; a new row). None: nothing fits."""
    exchanges = [(t.info["text"], t.reply or []) for t in e.turns]
    held = context + e.turns[-1].action_ids
    for start in range(len(exchanges) if opts.drop_old_turns else 1):
        ids = fmt.conversation_ids(e.prompt, exchanges[start:])
        if len(ids) > budget:
            continue
        m = common_prefix(held, ids)
        drift = 0 if start else len(held) - m
        if start:
            kind = "dropped"
        elif not drift:
            kind = "clean"
        else:
            kind = "realign" if m >= len(context) and drift < opts.fork_threshold_tokens else "fork"
        e.turns[-1].info.update(rerendered=kind, drift_tokens=drift)
        return ids, kind
    return None


def check_rows(e: Episode, contexts: list[list[int]]) -> None:
    """The tokens an episode trains on are the tokens sampled, each in the very context it was sampled
    from (the environment's tokens and re-rendered turns only ever as context): a bookkeeping error
    here would train the policy on sequences it never produced, so it stops the run."""
    for ids, mask, _, turn in e.segments():
        for k in sorted(set(turn) - {-1}):
            at = [i for i, x in enumerate(turn) if x == k]
            t = e.turns[k]
            ok = (
                at == list(range(at[0], at[0] + len(at)))
                and ids[: at[0]] == contexts[k]
                and ids[at[0] : at[-1] + 1] == t.action_ids[: len(at)]
                and all(mask[i] for i in at)
            )
            if not ok:
                raise RuntimeError(
                    f"episode of task {e.task.id!r}: the training row of turn {k + 1} is not its sampled tokens "
                    "in the context they were sampled from (a bookkeeping error in the rollout engine)"
                )


async def _greedy(sampler, fmt: ChatFormat, groups: list[Group], make_env, opts: RolloutOptions, stats: RolloutStats):
    """Each group's greedy episode: the same task rolled out once at temperature 0, every turn (no pruning)."""
    t0 = time.perf_counter()
    inner = RolloutStats()
    made = await rollout(sampler, fmt, [g.task for g in groups], make_env, 1, opts.plain(temperature=0.0), inner)
    for g, m in zip(groups, made):
        g.greedy = m.episodes[0]
        prompts = {e.prompt for e in g.episodes}
        if len(prompts) == 1 and g.greedy.prompt not in prompts:
            raise UserError(
                f"a greedy baseline answers the prompt its group answered, and task {g.task.id}'s environment "
                "started it from another observation (its reset is not a function of the task); use a credit "
                "without a greedy baseline, e.g. loss.advantage=grpo"
            )
    stats.errors += inner.errors  # counted like any env error
    stats.env_errors += inner.env_errors
    stats.gen_seconds += inner.gen_seconds
    stats.greedy_env_calls += inner.env_calls
    stats.greedy_tokens += inner.tokens
    stats.greedy_seconds += time.perf_counter() - t0


def _as_result(t: Turn) -> StepResult:
    return StepResult(score=t.score, success=t.success, done=False, feedback=t.feedback, status=t.status, info=t.info)


async def _counterfactual(
    sampler, eps: list[Episode], turn_ctx, make_env, opts: RolloutOptions, stats: RolloutStats
) -> None:
    """Resample M alternatives for the L selected turns from their fixed history and score them.

    Each alternative is scored by a fresh environment of the task: this assumes the verifier judges an
    answer on its own (true of refinement tasks); stateful environments should not enable it.
    """
    cf = opts.counterfactual
    assert cf is not None
    cands = [(e, k) for e in eps for k, t in enumerate(e.turns) if t.action_ids]
    if cf.select == "random":
        random.Random(cf.seed + len(cands)).shuffle(cands)
        chosen = cands[: cf.turns]
    else:
        surprisal = lambda ek: -sum(ek[0].turns[ek[1]].logprobs) / len(ek[0].turns[ek[1]].logprobs)
        chosen = sorted(cands, key=surprisal, reverse=True)[: cf.turns]
    if not chosen:
        return
    t0 = time.perf_counter()
    contexts, envs, owners = [], [], []
    for e, k in chosen:
        for _ in range(cf.samples):
            contexts.append(turn_ctx[(id(e), k)])
            env = make_env(e.task)
            await _reset(env)
            envs.append(env)
            owners.append((e, k))
    inner = RolloutStats()
    samples, _, results = await _sample_and_verify(sampler, contexts, envs, opts.sampling, inner)
    scores: dict[tuple[int, int], list[float]] = {}
    for (e, k), env, (res, _, err) in zip(owners, envs, results):
        if err is not None:  # an alternative the verifier could not score: counted like any env error
            stats.errors.append(err)
            stats.env_errors += 1
        scores.setdefault((id(e), k), []).append(_check_score(res, env, opts))
    for e, k in chosen:
        e.turns[k].info["cf_scores"] = scores[(id(e), k)]
    await asyncio.gather(*(env.close() for env in envs))
    stats.cf_env_calls += len(contexts)
    stats.cf_tokens += sum(len(s.ids) for s in samples)
    stats.cf_seconds += time.perf_counter() - t0
