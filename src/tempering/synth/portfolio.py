"""Choose which (seed, action) pairs to synthesise: the portfolio MILP with soft skill coverage.

Variables: x_c in {0,1} (candidate c = (seed, action) chosen), u_{c,v} in {0,1} (an optional skill v of c
counted towards coverage), xi_v in [0, xi_max] (coverage slack). Maximise

    sum_c x_c F_c  -  eps * sum u_{c,v}  -  lambda * sum_v xi_v

subject to: at most one action per seed; sum x = N; u = x for required skills (substituted below),
u <= x for optional ones; sum_c u_{c,v} + xi_v >= m_v for every skill v with a coverage target m_v.

Backends: HiGHS through SciPy's `milp`; exact enumeration (depth-first in candidate order with a bound);
a coverage-aware greedy. Ties are broken towards candidates earlier in the list (seed order, then action
order), the same way in every backend, and each tie inside a seed is logged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pydantic import Field

from tempering.config import Schema
from tempering.errors import UserError
from tempering.synth.scoring import Action

_TOL = 1e-9


@dataclass(frozen=True)
class Candidate:
    """One eligible (seed, action) pair with its score and skill contract."""

    seed: str
    """Name of the seed the action applies to."""
    action: Action
    """The synthesis action."""
    score: float
    """Frontier score F of the predicted pass rate."""
    predicted: float = float("nan")
    """Predicted pass rate p~ (for reports)."""
    required: frozenset[str] = frozenset()
    """Skills the synthesised task must exercise (u = x)."""
    optional: frozenset[str] = frozenset()
    """Skills it may exercise (u <= x)."""


class PortfolioConfig(Schema):
    """Constants of the portfolio program (defaults from the method note)."""

    eps: float = Field(
        1e-6, ge=0, description="Cost of counting an optional skill (keeps u = 0 unless coverage needs it)."
    )
    lam: float = Field(0.25, ge=0, description="Penalty per unit of coverage slack xi.")
    xi_max: float = Field(
        0.2, ge=0, description="Upper bound of each slack xi_v; below 1, an integer target m_v is effectively hard."
    )
    backend: Literal["auto", "highs", "enumerate", "greedy"] = Field(
        "auto",
        description="auto (HiGHS, else enumeration up to enumerate_max_candidates, else greedy), highs, enumerate or greedy.",
    )
    enumerate_max_candidates: int = Field(
        24, ge=1, description="Largest candidate count `auto` hands to exact enumeration when SciPy is missing."
    )


@dataclass
class Plan:
    """The chosen portfolio."""

    chosen: list[Candidate]
    """Chosen candidates, in candidate order."""
    objective: float
    """Objective value (recomputed exactly from the choice, the same way for every backend)."""
    backend: str
    """Which backend solved it: `highs`, `enumerate` or `greedy`."""
    slack: dict[str, float] = field(default_factory=dict)
    """Coverage slack xi_v per skill target."""
    ties: list[str] = field(default_factory=list)
    """Tie-breaks that were applied (one line each)."""


class InfeasiblePortfolio(UserError):
    """No portfolio meets the constraints; the message names the constraint."""


def _skill_cost(sel: list[Candidate], v: str, m: float, cfg: PortfolioConfig) -> tuple[float, float] | None:
    """Cheapest (eps*k + lam*xi, xi) covering skill v with the selection, or None if impossible."""
    req = sum(1 for c in sel if v in c.required)
    opt = sum(1 for c in sel if v in c.optional and v not in c.required)
    deficit = m - req
    best = None
    for k in range(opt + 1):
        xi = max(0.0, deficit - k)
        if xi > cfg.xi_max + _TOL:
            continue
        cost = cfg.eps * k + cfg.lam * xi
        if best is None or cost < best[0] - 1e-15:
            best = (cost, xi)
    return best


def evaluate(
    sel: list[Candidate], coverage: dict[str, float], cfg: PortfolioConfig
) -> tuple[float, dict[str, float]] | None:
    """Objective of a selection with its best u and xi (separable per skill), or None if infeasible."""
    total = sum(c.score for c in sel)
    slack = {}
    for v, m in coverage.items():
        best = _skill_cost(sel, v, m, cfg)
        if best is None:
            return None
        total -= best[0]
        slack[v] = best[1]
    return total, slack


def _seeds(cands: list[Candidate]) -> list[str]:
    return list(dict.fromkeys(c.seed for c in cands))


def _precheck(cands: list[Candidate], n: int, coverage: dict[str, float], cfg: PortfolioConfig) -> None:
    seeds = _seeds(cands)
    if n < 0:
        raise InfeasiblePortfolio(f"the number of bundles wanted must be >= 0 (got N={n})")
    if n > len(seeds):
        raise InfeasiblePortfolio(
            f"constraint sum x = N cannot hold: N={n} bundles wanted but only {len(seeds)} seed(s) have an "
            "eligible action (at most one action per seed); lower N or add seeds"
        )
    for v, m in coverage.items():
        reach = len({c.seed for c in cands if v in c.required or v in c.optional})
        best = min(reach, n)
        if best + cfg.xi_max < m - _TOL:
            raise InfeasiblePortfolio(
                f"coverage constraint for skill {v!r} cannot hold: it needs {m:g} task(s) but at most {best} "
                f"chosen task(s) can exercise it (slack at most {cfg.xi_max:g}); lower its target, raise "
                "xi_max, or add seeds that exercise it"
            )


def _joint_infeasible(cands, n, coverage, cfg) -> InfeasiblePortfolio:
    """Name the coverage constraints whose removal makes the program feasible."""
    culprits = []
    for v in coverage:
        rest = {w: m for w, m in coverage.items() if w != v}
        try:
            _solve_enumerate(cands, n, rest, cfg) if len(cands) <= 40 else _solve_highs(cands, n, rest, cfg)
            culprits.append(v)
        except InfeasiblePortfolio:
            pass
    names = ", ".join(repr(v) for v in (culprits or coverage))
    return InfeasiblePortfolio(
        f"the coverage constraints for skill(s) {names} cannot all hold together with N={n} and one action "
        "per seed; lower their targets or raise xi_max"
    )


def _solve_highs(cands, n, coverage, cfg) -> list[int]:
    """HiGHS for the optimum z*, then lexicographic fixing: walk seeds in order and keep, among the
    solutions with objective >= z* - tol, the earliest candidate of each seed (as enumeration does)."""
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import lil_matrix

    nc = len(cands)
    skills = list(coverage)
    u_index = [(i, v) for i, c in enumerate(cands) for v in skills if v in c.optional and v not in c.required]
    nu, nx = len(u_index), len(skills)
    nvar = nc + nu + nx
    obj = np.zeros(nvar)
    obj[:nc] = [-c.score for c in cands]
    obj[nc : nc + nu] = cfg.eps
    obj[nc + nu :] = cfg.lam
    # HiGHS stops within an absolute gap of 1e-6; scale so that eps-sized differences stay visible.
    scale = max(1.0, 1e-2 / cfg.eps) if cfg.eps > 0 else 1.0
    obj *= scale

    seeds = _seeds(cands)
    rows = len(seeds) + 1 + nu + nx
    A = lil_matrix((rows, nvar))
    lb, ub = np.full(rows, -np.inf), np.zeros(rows)
    for r, s in enumerate(seeds):  # one action per seed
        for i, c in enumerate(cands):
            if c.seed == s:
                A[r, i] = 1
        ub[r] = 1
    r = len(seeds)  # sum x = N
    A[r, :nc] = 1
    lb[r] = ub[r] = n
    for k, (i, _) in enumerate(u_index):  # u <= x (u = x for required skills is substituted)
        A[r + 1 + k, nc + k] = 1
        A[r + 1 + k, i] = -1
    base = r + 1 + nu
    for j, v in enumerate(skills):  # coverage: sum u + xi >= m_v
        for i, c in enumerate(cands):
            if v in c.required:
                A[base + j, i] = 1
        for k, (_, w) in enumerate(u_index):
            if w == v:
                A[base + j, nc + k] = 1
        A[base + j, nc + nu + j] = 1
        lb[base + j], ub[base + j] = coverage[v], np.inf
    constraints = [LinearConstraint(A.tocsr(), lb, ub)]
    integrality = np.r_[np.ones(nc + nu), np.zeros(nx)]
    lower, upper = np.zeros(nvar), np.r_[np.ones(nc + nu), np.full(nx, cfg.xi_max)]

    def run(extra=()):
        res = milp(
            obj,
            constraints=constraints + list(extra),
            integrality=integrality,
            bounds=Bounds(lower, upper),
            options={"mip_rel_gap": 0.0, "disp": False},
        )
        if res.status == 2:
            return None
        if res.x is None:
            raise RuntimeError(f"HiGHS did not solve the portfolio: {res.message}")
        return [i for i in range(nc) if res.x[i] > 0.5]

    incumbent = run()
    if incumbent is None:
        raise _joint_infeasible(cands, n, coverage, cfg)
    value = evaluate([cands[i] for i in incumbent], coverage, cfg)
    assert value is not None  # HiGHS's solution meets the coverage constraints
    z = value[0]
    floor = [LinearConstraint(obj.reshape(1, -1), -np.inf, scale * (-z + _TOL))]
    tops = {s: max(c.score for c in cands if c.seed == s) for s in seeds}
    for s in seeds:
        idx = [i for i, c in enumerate(cands) if c.seed == s]
        others = sorted((t for k, t in tops.items() if k != s), reverse=True)[: n - 1]
        for i in idx:
            if i in incumbent:
                lower[i] = 1
                break
            if cands[i].score + sum(others) >= z - _TOL:  # else no solution with i can reach z*
                lower[i] = 1
                trial = run(floor)
                if trial is not None:
                    incumbent = trial
                    break
                lower[i] = 0
            upper[i] = 0
    return incumbent


def _solve_enumerate(cands, n, coverage, cfg) -> list[int]:
    """Exact: depth-first over seeds, candidates in order then `none`; keeps the first strict optimum."""
    seeds = _seeds(cands)
    by_seed = [[i for i, c in enumerate(cands) if c.seed == s] for s in seeds]
    tops = [max(cands[i].score for i in idx) for idx in by_seed]
    best: list = [None, None]  # objective, selection

    def bound(k: int, left: int) -> float:
        return sum(sorted(tops[k:], reverse=True)[:left])

    def dfs(k: int, sel: list[int], score: float):
        left = n - len(sel)
        if left == 0:
            val = evaluate([cands[i] for i in sel], coverage, cfg)
            if val is not None and (best[0] is None or val[0] > best[0] + _TOL):
                best[0], best[1] = val[0], list(sel)
            return
        if len(seeds) - k < left:
            return
        if best[0] is not None and score + bound(k, left) <= best[0] + _TOL:
            return
        for i in by_seed[k]:
            sel.append(i)
            dfs(k + 1, sel, score + cands[i].score)
            sel.pop()
        dfs(k + 1, sel, score)

    dfs(0, [], 0.0)
    if best[1] is None:
        raise _joint_infeasible(cands, n, coverage, cfg) if coverage else InfeasiblePortfolio("no feasible portfolio")
    return best[1]


def _solve_greedy(cands, n, coverage, cfg) -> list[int]:
    """Add the candidate with the best marginal gain; unmet coverage counts at a large weight."""

    def relaxed(sel_idx):
        sel = [cands[i] for i in sel_idx]
        total = sum(c.score for c in sel)
        for v, m in coverage.items():
            have = sum(1 for c in sel if v in c.required or v in c.optional)
            total -= (1.0 + cfg.lam) * max(0.0, m - have)
        return total

    sel: list[int] = []
    used: set[str] = set()
    while len(sel) < n:
        base = relaxed(sel)
        gains = [(relaxed(sel + [i]) - base, -i) for i, c in enumerate(cands) if c.seed not in used]
        if not gains:
            break
        _, neg_i = max(gains)
        sel.append(-neg_i)
        used.add(cands[-neg_i].seed)
    sel.sort()
    if evaluate([cands[i] for i in sel], coverage, cfg) is None:
        unmet = [v for v in coverage if _skill_cost([cands[i] for i in sel], v, coverage[v], cfg) is None]
        raise InfeasiblePortfolio(
            f"the greedy portfolio misses the coverage constraint(s) for skill(s) {', '.join(map(repr, unmet))}; "
            "install SciPy for the exact MILP, or lower the targets"
        )
    return sel


def solve_portfolio(
    cands: list[Candidate], n: int, coverage: dict[str, float] | None = None, cfg: PortfolioConfig | None = None
) -> Plan:
    """Choose N candidates (at most one per seed) maximising frontier score under soft skill coverage."""
    cfg = cfg or PortfolioConfig()
    coverage = {v: float(m) for v, m in (coverage or {}).items() if m > 0}
    _precheck(cands, n, coverage, cfg)
    backend = cfg.backend
    if backend == "auto":
        try:
            import scipy.optimize  # noqa: F401

            backend = "highs"
        except ImportError:
            backend = "enumerate" if len(cands) <= cfg.enumerate_max_candidates else "greedy"
    solvers = {"highs": _solve_highs, "enumerate": _solve_enumerate, "greedy": _solve_greedy}
    if backend not in solvers:
        raise UserError(f"unknown portfolio backend {backend!r}; use one of auto, {', '.join(solvers)}")
    sel = solvers[backend](cands, n, coverage, cfg) if n > 0 else []
    chosen = [cands[i] for i in sel]
    value = evaluate(chosen, coverage, cfg)
    assert value is not None  # every solver returns a feasible selection or raises
    objective, slack = value
    ties = []
    for i in sel:
        c = cands[i]
        for d in cands[i + 1 :]:
            if d.seed == c.seed and abs(d.score - c.score) <= _TOL:
                ties.append(
                    f"seed {c.seed}: {c.action.name} and {d.action.name} tie at F={c.score:.6f}; "
                    f"chose {c.action.name} (earlier in action order)"
                )
    return Plan(chosen=chosen, objective=objective, backend=backend, slack=slack, ties=ties)
