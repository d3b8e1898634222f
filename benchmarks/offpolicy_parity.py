"""The anchors' rollout-correction outputs on fixed inputs, stored once in tests/data/offpolicy_parity.json
for tests/algos/test_correction_parity.py, and verl's outcome advantages of groups of one in
tests/data/verl_singleton_group.json for tests/algos/test_advantages.py. Runs in a throwaway environment with the anchors installed, never
in tempering's (nothing of theirs is imported by the package or its tests):

    python3 -m venv /tmp/anchors
    echo "$PWD/.venv/lib/python3.11/site-packages" > /tmp/anchors/lib/python3.11/site-packages/zz.pth  # torch
    /tmp/anchors/bin/pip install --no-deps trl==1.16.0 verl==0.9.1 areal==1.0.4 tensordict pyvers \
        codetiming omegaconf antlr4-python3-runtime==4.9.3 hydra-core colorlog torchdata lark uvloop numba \
        llvmlite einops
    /tmp/anchors/bin/python benchmarks/offpolicy_parity.py

verl's and AReaL's functions are called. TRL 1.16 computes its importance weights inline in
GRPOTrainer._generate_and_score_completions (no function to call alone), so its cases follow the formula
of its GRPOConfig docstring (`vllm_importance_sampling_mode`), labelled `"source": "formula"`.
"""

from __future__ import annotations

import json
import math
import sys
from importlib.metadata import version
from pathlib import Path

import torch

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "offpolicy_parity.json"
SINGLETON_OUT = OUT.with_name("verl_singleton_group.json")
LENGTHS = [8, 5, 3, 8, 1, 6, 0]
T = 8


def inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    B = len(LENGTHS)
    behav = -torch.rand(B, T, generator=g) * 3.0 - 0.05
    prox = behav + torch.randn(B, T, generator=g) * 0.6
    mask = torch.zeros(B, T)
    for b, n in enumerate(LENGTHS):
        mask[b, :n] = 1.0
    return prox * mask, behav * mask, mask


def trl_formula(prox, behav, mask, mode, clip_max, clip_min):
    """GRPOConfig.vllm_importance_sampling_mode: the ratio per token or per sequence (exp of the summed log
    ratio), clamped to [C_min, C_max] (`*_truncate`) or set to 0 outside it (`*_mask`); the completion mask
    (the loss normaliser) is unchanged."""
    d = (prox - behav) * mask
    if mode.startswith("sequence"):
        d = d.sum(-1, keepdim=True)
    r = d.exp()
    if mode.endswith("truncate"):
        w = r.clamp(min=clip_min, max=clip_max)
    else:
        lo = -math.inf if clip_min is None else clip_min
        hi = math.inf if clip_max is None else clip_max
        w = r.masked_fill((r < lo) | (r > hi), 0.0)
    return (w * mask).expand_as(mask), mask


def main() -> None:
    from areal.api.cli_args import RejectionSamplingConfig
    from areal.utils.functional.functional import apply_rejection_sampling, ppo_actor_loss_fn
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_weights, compute_rollout_rejection_mask

    prox, behav, mask = inputs()
    log_ratio = prox - behav
    cases = []

    def add(mode, cap, floor, anchor, source, call, w, m, **extra):
        cases.append(
            {
                "mode": mode,
                "cap": cap,
                "floor": floor,
                "anchor": anchor,
                "source": source,
                "call": call,
                "weights": w.tolist(),
                "loss_mask": m.tolist(),
                **extra,
            }
        )

    for level, mode in (("token", "tis"), ("sequence", "sequence_truncate")):
        w, _ = compute_rollout_correction_weights(log_ratio, mask, rollout_is=level, rollout_is_threshold=2.0)
        add(
            mode,
            2.0,
            None,
            f"verl {version('verl')}",
            "called",
            f"compute_rollout_correction_weights(rollout_is={level!r}, rollout_is_threshold=2.0)",
            w,
            mask,
        )
    for spec, cap, floor in (("0.5_5.0", 5.0, 0.5), ("0.7_1.5", 1.5, 0.7)):
        w, _ = compute_rollout_correction_weights(log_ratio, mask, rollout_is="token", rollout_is_threshold=spec)
        add(
            "icepop",
            cap,
            floor,
            f"verl {version('verl')}",
            "called",
            f"compute_rollout_correction_weights(rollout_is='token', rollout_is_threshold={spec!r})",
            w,
            mask,
        )
    for option, spec, cap, floor, mode in (
        ("seq_sum_k1", "0.5_2.0", 2.0, 0.5, "seq_sum_k1"),
        ("seq_mean_k1", "0.999_1.001", 1.001, 0.999, "seq_mean_k1"),
        ("seq_mean_k1", "0.8_1.25", 1.25, 0.8, "seq_mean_k1"),
    ):
        m, _ = compute_rollout_rejection_mask(log_ratio, mask, rollout_rs=option, rollout_rs_threshold=spec)
        add(
            mode,
            cap,
            floor,
            f"verl {version('verl')}",
            "called",
            f"compute_rollout_rejection_mask(rollout_rs={option!r}, rollout_rs_threshold={spec!r})",
            m,
            m,
        )
    for trl_mode, ours, cap, floor in (
        ("token_truncate", "tis", 3.0, None),
        ("token_truncate", "tis", 3.0, 0.5),
        ("sequence_truncate", "sequence_truncate", 3.0, None),
        ("token_mask", "token_mask", 3.0, None),
        ("sequence_mask", "sequence_mask", 3.0, None),
        ("sequence_mask", "sequence_mask", 3.0, 0.5),
    ):
        w, m = trl_formula(prox, behav, mask, trl_mode, cap, floor)
        add(
            ours,
            cap,
            floor,
            f"trl {version('trl')}",
            "formula",
            f"vllm_importance_sampling_mode={trl_mode!r}, clip_max={cap}, clip_min={floor}",
            w,
            m,
        )
    g = torch.Generator().manual_seed(1)
    current = prox + torch.randn(prox.shape, generator=g) * 0.2 * mask  # the policy being updated
    adv = torch.randn(len(LENGTHS), 1, generator=g).expand_as(mask) * mask
    for cap, floor in ((5.0, None), (2.0, 0.5)):
        rs = RejectionSamplingConfig(level="token", action="mask", metric="ratio", upper=cap, lower=floor)
        r = apply_rejection_sampling(prox, behav, mask.bool(), None, rs)
        loss, _ = ppo_actor_loss_fn(
            current, prox, behav, adv, 0.2, mask.bool(), eps_clip_higher=0.28, c_clip=3.0, rejection_sampling=rs
        )
        # AReaL shrinks its loss mask but divides by the original token count (loss_mask_count)
        add(
            "decoupled",
            cap,
            floor,
            f"areal {version('areal')}",
            "called",
            f"apply_rejection_sampling(RejectionSamplingConfig(level='token', action='mask', metric='ratio', "
            f"upper={cap}, lower={floor})); ppo_actor_loss_fn(eps_clip=0.2, eps_clip_higher=0.28, c_clip=3.0)",
            r.behave_imp_weight,
            mask,
            loss=float(loss),
            current=current.tolist(),
            advantages=adv.tolist(),
        )
    data = {
        "command": " ".join(["/tmp/anchors/bin/python", *sys.argv]),
        "versions": {k: version(k) for k in ("trl", "verl", "areal", "torch")},
        "inputs": {"prox_logp": prox.tolist(), "behav_logp": behav.tolist(), "mask": mask.tolist()},
        "cases": cases,
    }
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(f"{len(cases)} cases -> {OUT}")
    singleton_groups()


def singleton_groups() -> None:
    """verl's GRPO (with and without the std), and RLOO, where every prompt has one response."""
    import numpy as np
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage, compute_rloo_outcome_advantage

    scores = torch.tensor([0.7, -1.5, 0.0, 2.25, 1.0])
    rewards = torch.zeros(len(scores), 3)
    rewards[:, -1] = scores  # the outcome reward sits on the last token
    mask = torch.ones_like(rewards)
    index = np.array([f"p{i}" for i in range(len(scores))])  # one response per prompt
    out = {}
    for name, fn in (
        ("grpo", lambda: compute_grpo_outcome_advantage(rewards, mask, index, norm_adv_by_std_in_grpo=True)),
        ("dr_grpo", lambda: compute_grpo_outcome_advantage(rewards, mask, index, norm_adv_by_std_in_grpo=False)),
        ("rloo", lambda: compute_rloo_outcome_advantage(rewards, mask, index)),
    ):
        adv, _ = fn()
        out[name] = adv[:, 0].tolist()  # every token of a response carries its advantage
    data = {
        "command": " ".join(["/tmp/anchors/bin/python", *sys.argv]),
        "versions": {"verl": version("verl")},
        "call": "verl.trainer.ppo.core_algos.compute_{grpo,rloo}_outcome_advantage, index = one prompt per response",
        "scores": scores.tolist(),
        "advantages": out,
    }
    SINGLETON_OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(f"singleton groups -> {SINGLETON_OUT}")


if __name__ == "__main__":
    main()
