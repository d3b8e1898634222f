"""The FORGE loop: plan -> generate -> static check -> gold verify -> repair (K times) -> next-best action.

Each round scores every eligible (seed, action) pair, solves the portfolio for as many bundles as are
still wanted (at most one per seed), and realises the plan: a generator writes a candidate, static
checks and gold verification judge it, a failure goes back to the generator as a repair (up to
`repairs` times), and after that the seed's next-best action is tried (up to `fallback_actions`).
Rounds repeat until `target` bundles are accepted or no pair is left. Attempts and tokens are counted
per accepted bundle.

Baselines are the same program with masks: the method names the actions allowed (few_shot:
diversify/in_depth, self_instruct: diversify/in_breadth, evol: increase/in_depth) and, being fixed
recipes, they do not look at pass rates (every candidate scores 1, so seeds are used in turn).
"""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from pydantic import Field, model_validator

from tempering.errors import UserError
from tempering.synth.checks import CheckLimits, check_bundle
from tempering.synth.generators import ChatConfig, Generator, Request
from tempering.synth.portfolio import Candidate, Plan, PortfolioConfig, solve_portfolio
from tempering.synth.scoring import ACTIONS, Action, ScoringConfig, score_actions
from tempering.synth.seeds import BundleSeed, Seed
from tempering.synth.task_seeds import ConfigChecks
from tempering.synth.verify import VerifySettings

METHODS: dict[str, tuple[Action, ...]] = {
    "forge": ACTIONS,
    "few_shot": (Action("diversify", "in_depth"),),
    "self_instruct": (Action("diversify", "in_breadth"),),
    "evol": (Action("increase", "in_depth"),),
}


class SynthConfig(VerifySettings):
    """Settings of one synthesis run."""

    generator: Literal["mutators", "llm"] = Field(
        "mutators", description="The built-in deterministic mutators (offline) or an OpenAI-compatible chat endpoint."
    )
    chat: ChatConfig = Field(default_factory=ChatConfig, description="The chat endpoint (generator=llm).")
    max_new_tokens: int = Field(16, gt=0, description="Answer token limit when a policy measures configurations.")

    method: Literal["forge", "few_shot", "self_instruct", "evol"] = Field(
        "forge", description="forge, or a baseline mask: few_shot, self_instruct, evol."
    )
    target: int = Field(9, ge=1, description="Accepted bundles wanted.")
    repairs: int = Field(2, ge=0, description="Repair attempts K after a failed attempt, per action [proposal].")
    fallback_actions: int = Field(1, ge=0, description="Next-best actions of a seed tried after its chosen one fails.")
    max_per_pair: int = Field(
        3, ge=1, description="Accepted bundles per (seed, action) before the pair is filtered out (overlap risk)."
    )
    max_rounds: int = Field(50, ge=1, description="Planning rounds at most.")
    concurrency: int = Field(4, ge=1, description="Plan items generated and verified at once.")
    coverage: dict[str, float] = Field(
        default_factory=dict,
        description="Skill coverage targets m_v over the accepted set ({skill: count}); each round asks for what is still missing.",
    )
    rollouts: int = Field(8, ge=1, description="Policy rollouts per task when pass rates are measured [proposal].")
    measure_tasks: int = Field(
        4, ge=1, description="Tasks of a configuration measured with the policy (a bundle is one task)."
    )
    scoring: ScoringConfig = Field(default_factory=ScoringConfig, description="Predicted pass rate and frontier score.")
    portfolio: PortfolioConfig = Field(default_factory=PortfolioConfig, description="The portfolio MILP.")
    checks: CheckLimits = Field(default_factory=CheckLimits, description="Static check bounds of bundles.")
    config_checks: ConfigChecks = Field(
        default_factory=ConfigChecks, description="Check bounds of task-family configurations."
    )

    @model_validator(mode="after")
    def _check(self):
        if self.generator != "llm" and self.chat != ChatConfig():
            raise ValueError("chat.* settings have no effect unless generator=llm; remove them, or set generator=llm")
        return self


class Checker(Protocol):
    """Judges candidates of one kind of seed."""

    def static(self, cand: Any, seed: Any, action: Action, required: frozenset[str]) -> list[str]:
        """Static problems (empty when fine)."""

    async def gold(self, cand: Any) -> tuple[bool, str]:
        """(accepted, failure summary)."""


class BundleChecker:
    """Static bundle checks (tempering.synth.checks), then gold verification (tempering.synth.verify)."""

    def __init__(self, verifier, limits: CheckLimits | None = None):
        self.verifier = verifier
        self.limits = limits or CheckLimits()

    def static(self, cand: BundleSeed, seed: BundleSeed, action: Action, required: frozenset[str]) -> list[str]:
        return [str(p) for p in check_bundle(cand.bundle, seed.bundle, action.edit_mask, required, self.limits)]

    async def gold(self, cand: BundleSeed) -> tuple[bool, str]:
        v = await self.verifier.verify(cand.bundle)
        return v.accepted, v.summary


@dataclass
class Accepted:
    """One accepted bundle with its accounting."""

    candidate: Any
    """The accepted seed-like object (a BundleSeed for bundles)."""
    seed: str
    """Name of the seed it came from."""
    action: Action
    """The action that produced it."""
    predicted: float
    """Predicted pass rate of that action."""
    score: float
    """Frontier score of the prediction."""
    attempts: int
    """Generator calls spent on this bundle, failed actions of the same seed included."""
    tokens: int
    """Generator tokens spent on it."""
    measured: float | None = None
    """Pass rate of the current policy on it, when measured."""


@dataclass
class Report:
    """Everything a run produced."""

    method: str
    accepted: list[Accepted] = field(default_factory=list)
    attempts: int = 0
    """Generator calls in total (accepted or not)."""
    tokens: int = 0
    """Generator tokens in total."""
    tokens_estimated: bool = False
    """Some token counts were estimated (the endpoint reported no usage)."""
    plans: list[dict[str, Any]] = field(default_factory=list)
    """Per round: backend, objective, chosen pairs, ties."""
    events: list[dict[str, Any]] = field(default_factory=list)
    """One record per attempt: seed, action, attempt, stage, problems."""
    verification_errors: int = 0
    """Attempts whose gold verification raised (stage `gold_error` in `events`, with the error)."""

    def summary(self, band: tuple[float, float] = (0.25, 0.75)) -> dict[str, Any]:
        n = len(self.accepted)
        measured = [a.measured for a in self.accepted if a.measured is not None]
        return {
            "method": self.method,
            "accepted": n,
            "attempts": self.attempts,
            "attempts_per_accepted": self.attempts / n if n else None,
            "tokens": self.tokens,
            "tokens_per_accepted": self.tokens / n if n else None,
            "tokens_estimated": self.tokens_estimated,
            "verification_errors": self.verification_errors,
            "predicted_pass_rate_mean": statistics.fmean(a.predicted for a in self.accepted) if n else None,
            "measured_pass_rate_mean": statistics.fmean(measured) if measured else None,
            "frontier_share": (sum(band[0] <= m <= band[1] for m in measured) / len(measured)) if measured else None,
        }


Progress = Callable[[Report], None]


def candidates(
    seeds: Sequence[Seed],
    pass_rates: dict[str, float],
    cfg: SynthConfig,
    generator: Generator,
    exhausted: set[tuple[str, Action]],
    used: dict[tuple[str, Action], int],
) -> list[Candidate]:
    """Eligible (seed, action) pairs in seed order then action order, scored by the frontier score.
    Filters: the method's mask, actions impossible from the seed, seeds the generator cannot take,
    pairs already tried without success, and pairs that produced `max_per_pair` bundles."""
    allowed = METHODS[cfg.method]
    out = []
    for seed in seeds:
        if not generator.fits(seed):
            continue
        scores = score_actions(pass_rates[seed.name], allowed, cfg.scoring)
        for action in allowed:
            key = (seed.name, action)
            if key in exhausted or used.get(key, 0) >= cfg.max_per_pair:
                continue
            contract = seed.contract(action)
            if contract is None:
                continue
            predicted, score = scores[action]
            if cfg.method != "forge":
                score = 1.0  # fixed recipes ignore the policy's pass rates
            out.append(Candidate(seed.name, action, score, predicted, contract.required, contract.optional))
    return out


async def synthesize(
    seeds: Sequence[Seed],
    pass_rates: dict[str, float],
    generator: Generator,
    checker: Checker,
    cfg: SynthConfig | None = None,
    measure: Callable[[Any], Awaitable[float]] | None = None,
    progress: Progress | None = None,
) -> Report:
    """Run FORGE (or a baseline mask) until `cfg.target` candidates are accepted or nothing is left."""
    cfg = cfg or SynthConfig()
    by_name = {s.name: s for s in seeds}
    if len(by_name) != len(seeds):
        raise UserError("two seeds share a name; seed names must be unique")
    missing = [s.name for s in seeds if s.name not in pass_rates]
    if missing:
        raise UserError(f"no pass rate for seed(s) {', '.join(missing)}")
    report = Report(cfg.method)
    exhausted: set[tuple[str, Action]] = set()
    used: dict[tuple[str, Action], int] = {}
    digests: set[str] = set()
    gate = asyncio.Semaphore(cfg.concurrency)

    async def realise(cand: Candidate, pool: list[Candidate], round_no: int) -> None:
        seed = by_name[cand.seed]
        p = pass_rates[cand.seed]
        ranked = sorted(
            (c for c in pool if c.seed == cand.seed and c.action != cand.action),
            key=lambda c: (-c.score, c.action.rank),
        )
        attempts = tokens = 0
        for c in [cand, *ranked[: cfg.fallback_actions]]:
            failure = previous = None
            for k in range(cfg.repairs + 1):
                contract = seed.contract(c.action)
                assert contract is not None  # candidates() keeps only actions with a contract
                req = Request(
                    seed,
                    c.action,
                    p,
                    c.predicted,
                    c.score,
                    contract,
                    cfg.scoring.tau,
                    salt=1000 * round_no + k,
                    failure=failure,
                    previous=previous,
                )
                async with gate:
                    gen = await generator.generate(req)
                    attempts += 1
                    tokens += gen.tokens
                    report.attempts += 1
                    report.tokens += gen.tokens
                    report.tokens_estimated |= gen.tokens_estimated
                    event = {
                        "round": round_no,
                        "seed": cand.seed,
                        "action": c.action.name,
                        "attempt": k,
                        "repair": failure is not None,
                        "tokens": gen.tokens,
                    }
                    if gen.candidate is None:
                        stage, failure = "format", gen.error
                    else:
                        problems = checker.static(gen.candidate, seed, c.action, req.contract.required)
                        digest = getattr(gen.candidate, "digest", lambda: None)()
                        if digest is not None and digest in digests:
                            problems.append("[overlap] the bundle duplicates one already accepted")
                        if problems:
                            stage, failure = "static", "Static checks failed:\n" + "\n".join(problems)
                        else:
                            try:
                                ok, summary = await checker.gold(gen.candidate)
                                stage, failure = (
                                    ("accepted", None) if ok else ("gold", "Gold verification failed: " + summary)
                                )
                            except UserError:
                                raise  # the set-up is wrong (no engine, bad settings): stop the run
                            except Exception as e:  # one bad bundle is a failed attempt, recorded, not the run's end
                                ok = False
                                report.verification_errors += 1
                                stage = "gold_error"
                                failure = f"Gold verification could not run: {type(e).__name__}: {e}"
                            if ok and digest is not None:
                                if digest in digests:  # a concurrent twin got there first
                                    stage, failure = "static", "[overlap] the bundle duplicates one already accepted"
                                else:
                                    digests.add(digest)
                    event.update(stage=stage, failure=(failure or "")[:2000])
                    report.events.append(event)
                if stage == "accepted":
                    if len(report.accepted) >= cfg.target:
                        return
                    measured = await measure(gen.candidate) if measure is not None else None
                    report.accepted.append(
                        Accepted(gen.candidate, cand.seed, c.action, c.predicted, c.score, attempts, tokens, measured)
                    )
                    used[(cand.seed, c.action)] = used.get((cand.seed, c.action), 0) + 1
                    if progress:
                        progress(report)
                    return
                previous = gen.raw
            exhausted.add((cand.seed, c.action))
        if progress:
            progress(report)

    for round_no in range(cfg.max_rounds):
        wanted = cfg.target - len(report.accepted)
        if wanted <= 0:
            break
        pool = candidates(seeds, pass_rates, cfg, generator, exhausted, used)
        n = min(wanted, len({c.seed for c in pool}))
        if n == 0:
            break
        if cfg.method != "forge":  # fixed recipes take seeds in turn, least used first
            count = {s.name: sum(v for (name, _), v in used.items() if name == s.name) for s in seeds}
            order = {s.name: i for i, s in enumerate(sorted(seeds, key=lambda s: count[s.name]))}
            pool.sort(key=lambda c: (order[c.seed], c.action.rank))
        have = {v: sum(v in getattr(a.candidate, "skills", ()) for a in report.accepted) for v in cfg.coverage}
        coverage = {v: min(m - have[v], n) for v, m in cfg.coverage.items() if m - have[v] > 0}
        plan: Plan = solve_portfolio(pool, n, coverage, cfg.portfolio)
        report.plans.append(
            {
                "round": round_no,
                "backend": plan.backend,
                "objective": plan.objective,
                "chosen": [f"{c.seed}:{c.action.name}" for c in plan.chosen],
                "ties": plan.ties,
                "slack": plan.slack,
            }
        )
        await asyncio.gather(*(realise(c, pool, round_no) for c in plan.chosen))
    return report
