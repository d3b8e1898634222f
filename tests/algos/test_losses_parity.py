"""Policy losses, estimators and the rollout correction against verl 0.9.1's and TRL 1.16's own functions
(tests/data/losses_parity.json, written by benchmarks/losses_parity.py in a separate environment with the
anchors installed): every case within 1e-6 of the anchor's numbers (losses: the value and its gradient).

`ours` computes tempering's side of a case from its description; the benchmark uses it too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tempering.algos.correction import CORRECTIONS, rollout_correction
from tempering.algos.credit import CREDIT, TurnTensors
from tempering.algos.losses import POLICY_LOSSES, LossNorm, LossSettings, PolicyObjective, policy_objective

FIXTURE = Path(__file__).parents[1] / "data" / "losses_parity.json"
TOL = 1e-6


def tensors(inputs: dict) -> dict[str, torch.Tensor]:
    return {k: torch.tensor(v) for k, v in inputs.items()}


def as_case_dtype(case: dict, x: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Loss cases run in float64 (on the anchor's side too): extreme ratios make terms of 1e5, where float32
    sums in another order differ by more than the tolerance; the others run in float32."""
    return {k: v.double() for k, v in x.items()} if case["kind"] == "loss" else x


def ours(case: dict, x: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """tempering's numbers for one case: a loss's value and gradients, an estimator's advantages (B, T), or a
    correction's weights and loss mask."""
    if case["kind"] == "loss":
        logp = x["logp"].clone().requires_grad_(True)
        ent = x["entropy"].clone().requires_grad_(True)
        o = case["objective"]
        objective = PolicyObjective(
            o["loss"],
            LossSettings(o.get("clip_low", 0.2), o.get("clip_high", 0.28), o.get("dual_clip"), o.get("params", {})),
            o["agg"],
            o.get("entropy_coef", 0.0),
            o.get("entropy_coef", 0.0) > 0,
            o.get("entropy_top_quantile", 1.0),
            o.get("off_policy_mask_threshold"),
        )
        if o["loss"] == "clip_cov":
            torch.manual_seed(case["torch_seed"])  # its draw uses torch's global generator, as verl's does
        mask = x["mask"]
        norm = LossNorm.of(mask, max_len=o.get("max_len"))
        loss, _ = policy_objective(logp, x["old"], x["adv"], mask, ent, objective, norm, x.get("rollout"))
        loss.backward()
        grad_ent = ent.grad if ent.grad is not None else torch.zeros_like(ent)
        return {"loss": loss.detach()[None], "grad_logp": logp.grad, "grad_entropy": grad_ent}
    if case["kind"] == "estimator":
        mask, G = x["mask"], case["group_size"]
        B = mask.shape[0]
        comps = x.get("components")
        t = TurnTensors(
            scores_NGK=x["rewards"].view(-1, G, 1),
            success_NGK=torch.zeros(B // G, G, 1),
            valid_NGK=torch.ones(B // G, G, 1),
            tokens_NGK=mask.sum(-1).view(-1, G, 1),
            rewards_NG=x["rewards"].view(-1, G),
            cf_mean_NGK=torch.zeros(B // G, G, 1),
            cf_mask_NGK=torch.zeros(B // G, G, 1),
            components_NGC=None if comps is None else comps.view(-1, G, comps.shape[-1]),
            component_names=tuple(case.get("component_names", ())),
            greedy_N=x.get("greedy"),
        )
        adv = CREDIT[case["credit"]](t, **case.get("credit_args", {}))
        return {"advantages": adv.reshape(B, 1) * mask}
    w, mask, stats = rollout_correction(
        x["prox"],
        x["behav"],
        x["mask"],
        case["mode"],
        case.get("cap"),
        case.get("floor"),
        None,
        case.get("batch_norm", False),
    )
    return {"weights": w * mask, "loss_mask": mask.float(), "mismatch_kl": torch.tensor([stats["mismatch_kl"]])}


def max_abs_diff(mine: dict[str, torch.Tensor], theirs: dict) -> float:
    worst = 0.0
    for k, v in theirs.items():
        a, b = mine[k].double(), torch.tensor(v, dtype=torch.float64).reshape(mine[k].shape)
        assert torch.equal(torch.isfinite(a), torch.isfinite(b)), k
        fin = torch.isfinite(a)
        worst = max(worst, float((a[fin] - b[fin]).abs().max()) if bool(fin.any()) else 0.0)
    return worst


DATA = json.loads(FIXTURE.read_text()) if FIXTURE.is_file() else {"cases": [], "inputs": {}}


@pytest.mark.parametrize("case", DATA["cases"], ids=lambda c: c["id"])
def test_the_case_matches_the_anchor(case):
    x = as_case_dtype(case, tensors(DATA["inputs"][case["inputs"]]))
    tol = case.get("tolerance", {}).get("max_abs_diff", TOL)  # with the reason, where a definition differs
    assert max_abs_diff(ours(case, x), case["anchor_out"]) <= tol


def test_the_cases_cover_every_loss_estimator_and_correction():
    kinds = {(c["kind"], c.get("objective", {}).get("loss") or c.get("credit") or c.get("mode")) for c in DATA["cases"]}
    assert {("loss", n) for n in POLICY_LOSSES} <= kinds
    new = ("reinforce_pp", "reinforce_pp_baseline", "grpo_passk", "gdpo", "remax")
    assert {("estimator", n) for n in new} <= kinds
    modes = {m for k, m in kinds if k == "correction"} | {"decoupled", "bypass", "bypass_ppo_clip", "none"}
    assert modes >= set(CORRECTIONS)  # AReaL's decoupled: tests/data/offpolicy_parity.json; bypass has no weights


def test_a_wrong_loss_fails_the_comparison():
    """The comparison can fail: PPO-clip's case against GSPO-token's numbers differs by far more than 1e-6."""
    ppo = next(c for c in DATA["cases"] if c["kind"] == "loss" and c["objective"]["loss"] == "ppo_clip")
    wrong = {**ppo, "objective": {**ppo["objective"], "loss": "cispo", "clip_low": 1.0}}
    x = as_case_dtype(wrong, tensors(DATA["inputs"][ppo["inputs"]]))
    assert max_abs_diff(ours(wrong, x), ppo["anchor_out"]) > 1e-3
