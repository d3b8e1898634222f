"""Policy losses, advantage estimators and the rollout correction against verl 0.9.1's and TRL 1.16's own
functions, on fixed random inputs (ragged masks, single-token rows, a group with equal rewards, extreme
ratios). Writes the anchors' numbers to tests/data/losses_parity.json (tests/algos/test_losses_parity.py
compares tempering to them, so CI needs neither anchor) and the largest differences to the `parity` part of
docs/results/losses.{json,md}.

Runs in a throwaway environment with the anchors installed, never in tempering's:

    python3 -m venv /work/tmp/anchors
    echo "$PWD/.venv/lib/python3.11/site-packages" > /work/tmp/anchors/lib/python3.11/site-packages/zz.pth  # torch, tempering
    /work/tmp/anchors/bin/pip install --no-deps verl==0.9.1 trl==1.16.0 tensordict pyvers codetiming omegaconf \
        antlr4-python3-runtime==4.9.3 hydra-core colorlog torchdata lark uvloop einops orjson
    /work/tmp/anchors/bin/python benchmarks/losses_parity.py

verl's functions are called as its actor calls them (`core_algos.get_policy_loss_fn(name)`, `agg_loss`, the
advantage estimators, `rollout_corr_helper`). TRL 1.16 computes its loss inline in
`GRPOTrainer._compute_loss`, which is called on a stand-in trainer whose forward returns the fixed
log-probs and entropies (one process, one micro-batch); its vLLM importance weights are computed inline in
`_generate_and_score_completions`, so those cases follow the formula of GRPOConfig's docstring
(`"source": "formula"`).
"""

from __future__ import annotations

import importlib.util
import json
import math
import platform
import sys
from collections import defaultdict
from importlib.metadata import version
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "data" / "losses_parity.json"
LENGTHS = [8, 5, 1, 8, 3, 6, 1, 7]  # ragged, two single-token rows
T, G = 8, 4
AGGS = ("token-mean", "token-sum", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")


def _evaluator():
    """tests/algos/test_losses_parity.py: `ours` and `max_abs_diff`, the same code the test runs."""
    spec = importlib.util.spec_from_file_location("parity_test", ROOT / "tests" / "algos" / "test_losses_parity.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


def inputs(seed: int, extreme: bool) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    B = len(LENGTHS)
    mask = torch.zeros(B, T)
    for b, n in enumerate(LENGTHS):
        mask[b, :n] = 1.0
    old = -(torch.rand(B, T, generator=g) * 3.0 + 0.05)
    logp = (old + torch.randn(B, T, generator=g) * 0.3).clamp(max=-1e-3)
    rollout = (old + torch.randn(B, T, generator=g) * 0.2).clamp(max=-1e-3)
    if extreme:  # ratios far outside any clip: log r of +-12 (and a row whose tokens cancel)
        old[0, 1], logp[0, 1] = -13.0, -1.0
        old[3, 2], logp[3, 2] = -0.5, -12.5
        old[5, 0], logp[5, 0] = -0.2, -11.0
    adv = torch.randn(B, 1, generator=g)
    adv[G:] = 0.0  # the second group's rewards are all equal: zero advantage
    adv[1] = 0.0
    behav = old + torch.randn(B, T, generator=g) * 0.5
    if extreme:  # |log rho| past 20 on tokens whose episode sum is small: verl clamps the sum, not the tokens
        old[4, 0], behav[4, 0] = -0.1, -25.1
        old[4, 1], behav[4, 1] = -24.6, -0.1
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.2, 1.0, 1.0, 1.0, 1.0])
    components = torch.stack([rewards, torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.5, 1.0])], -1)
    return {
        "logp": logp * mask,
        "old": old * mask,
        "rollout": rollout * mask,
        "adv": adv.expand(B, T) * mask,
        "mask": mask,
        "entropy": torch.rand(B, T, generator=g) * 2.0 * mask,
        "prox": old * mask,
        "behav": behav * mask,
        "rewards": rewards,
        "components": components,
        "greedy": torch.tensor([0.5, 0.0]),  # each group's greedy answer (ReMax): the equal group's is lower
    }


# ---- verl ---------------------------------------------------------------------------------------------
def verl_loss(x, mode, agg, clip=(0.2, 0.28), c=3.0, entropy_coef=0.0, **policy):
    from verl.trainer.ppo import core_algos
    from verl.workers.config import ActorConfig, PolicyLossConfig

    cfg = ActorConfig(
        strategy="fsdp",
        rollout_n=G,
        clip_ratio=clip[0],
        clip_ratio_low=clip[0],
        clip_ratio_high=clip[1],
        clip_ratio_c=c,
        tau_pos=policy.pop("tau_pos", 1.0),
        tau_neg=policy.pop("tau_neg", 1.05),
        policy_loss=PolicyLossConfig(loss_mode=mode, **policy),
        ppo_micro_batch_size_per_gpu=1,
        ppo_mini_batch_size=1,
    )
    logp = x["logp"].clone().requires_grad_(True)
    ent = x["entropy"].clone().requires_grad_(True)
    loss, _ = core_algos.get_policy_loss_fn(mode)(
        old_log_prob=x["old"],
        log_prob=logp,
        advantages=x["adv"],
        response_mask=x["mask"],
        loss_agg_mode=agg,
        config=cfg,
    )
    if entropy_coef:  # verl's actor: policy loss - entropy_coeff * agg_loss(entropy)
        loss = loss - entropy_coef * core_algos.agg_loss(ent, x["mask"], agg)
    loss.backward()
    grad_e = ent.grad if ent.grad is not None else torch.zeros_like(ent)
    return {"loss": [float(loss.detach())], "grad_logp": logp.grad.tolist(), "grad_entropy": grad_e.tolist()}


def verl_estimator(x, name, **kw):
    from verl.trainer.ppo import core_algos

    mask = x["mask"]
    B = mask.shape[0]
    last = mask.sum(-1).long() - 1
    token_rewards = torch.zeros_like(mask)
    token_rewards[torch.arange(B), last] = x["rewards"]
    index = np.array([f"g{b // G}" for b in range(B)])
    fn = core_algos.get_adv_estimator_fn(name)
    if name == "reinforce_plus_plus":
        adv, _ = fn(token_level_rewards=token_rewards, response_mask=mask, config=SimpleNamespace(gamma=1.0))
    elif name == "remax":  # verl's trainer repeats each prompt's greedy reward over its rollout.n rows
        adv, _ = fn(
            token_level_rewards=token_rewards, reward_baselines=x["greedy"].repeat_interleave(G), response_mask=mask
        )
    elif name == "gdpo":
        prompts = torch.zeros(B, 2, dtype=torch.long)
        batch = {"prompts": prompts, "attention_mask": torch.cat([torch.ones(B, 2), mask], -1).long()}
        keys = ["accuracy", "format"]
        nt = {k: x["components"][:, i].numpy() for i, k in enumerate(keys)}
        cfg = {"gdpo_reward_keys": keys, "gdpo_reward_weights": kw.get("weights")}
        adv, _ = fn(
            token_level_rewards=token_rewards,
            response_mask=mask,
            index=index,
            config=cfg,
            non_tensor_batch=nt,
            batch=batch,
        )
    else:
        adv, _ = fn(token_level_rewards=token_rewards, response_mask=mask, index=index, config=kw)
    return {"advantages": (adv * mask).tolist()}


def verl_correction(x, is_level=None, is_threshold=2.0, rs=None, rs_threshold=None, batch_norm=False):
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_rejection_mask

    weights, mask, metrics = compute_rollout_correction_and_rejection_mask(
        x["prox"], x["behav"], x["mask"], is_level, is_threshold, batch_norm, rs, rs_threshold
    )
    w = weights.batch["rollout_is_weights"] if weights is not None else x["mask"]
    out = {"weights": (w * mask).tolist(), "loss_mask": mask.float().tolist()}
    if float(((x["prox"] - x["behav"]) * x["mask"]).abs().max()) <= 20.0:  # ours clamps |log rho| at 20 (a metric)
        out["mismatch_kl"] = [metrics["rollout_corr/k3_kl"]]
    return out


# ---- TRL ----------------------------------------------------------------------------------------------
class _Accelerator:
    num_processes, sync_gradients = 1, True

    def gather(self, t):
        return t

    gather_for_metrics = gather

    def reduce(self, t, reduction="sum"):
        return t

    def pad_across_processes(self, t, dim=0, pad_index=0):
        return t


def trl_loss(x, loss_type, level="token", eps=(0.2, 0.28), delta=None, entropy_coef=0.0, top_q=1.0, opm=None, **args):
    from trl import GRPOTrainer

    logp = x["logp"].clone().requires_grad_(True)
    ent = x["entropy"].clone().requires_grad_(True)
    a = SimpleNamespace(
        delta=delta,
        sapo_temperature_pos=args.get("sapo_tau_pos", 1.0),
        sapo_temperature_neg=args.get("sapo_tau_neg", 1.05),
        vespo_k_pos=2.0,
        vespo_lambda_pos=3.0,
        vespo_k_neg=3.0,
        vespo_lambda_neg=2.0,
        use_bias_correction_kl=False,
        steps_per_generation=1,
        entropy_target=0.2,
        entropy_coef_delta=0.005,
        entropy_coef_min=0.0,
        entropy_coef_max=1.0,
    )
    t = SimpleNamespace(
        args=a,
        accelerator=_Accelerator(),
        model=SimpleNamespace(training=True),
        loss_type=loss_type,
        importance_sampling_level=level,
        epsilon_low=eps[0],
        epsilon_high=eps[1],
        beta=0.0,
        top_entropy_quantile=top_q,
        off_policy_mask_threshold=opm,
        use_vllm=False,
        vllm_importance_sampling_correction=False,
        current_gradient_accumulation_steps=1,
        max_completion_length=T,
        aux_loss_enabled=False,
        entropy_coef=entropy_coef,
        use_adaptive_entropy=False,
        _entropy_bonus_enabled=entropy_coef != 0.0,
        _last_world_entropy=float("inf"),
        _entropy_window_stats=None,
        _metrics=defaultdict(lambda: defaultdict(list)),
    )
    t._get_per_token_logps_and_entropies = lambda *_, **__: (logp, ent, None)
    t.get_high_entropy_mask = lambda e, m, q: GRPOTrainer.get_high_entropy_mask(t, e, m, q)
    t.get_off_policy_mask = GRPOTrainer.get_off_policy_mask
    t.get_gamma_weights = GRPOTrainer.get_gamma_weights
    B = x["mask"].shape[0]
    inputs = {
        "prompt_ids": torch.zeros(B, 1, dtype=torch.long),
        "prompt_mask": torch.ones(B, 1, dtype=torch.long),
        "completion_ids": torch.zeros(B, T, dtype=torch.long),
        "completion_mask": x["mask"],
        "advantages": x["adv"][:, 0],
        "old_per_token_logps": x["old"],
        "num_items_in_batch": x["mask"].sum(),
    }
    if opm is not None:
        inputs["sampling_per_token_logps"] = x["rollout"]
    loss = GRPOTrainer._compute_loss(t, None, inputs)
    loss.backward()
    grad_e = ent.grad if ent.grad is not None else torch.zeros_like(ent)
    return {"loss": [float(loss.detach())], "grad_logp": logp.grad.tolist(), "grad_entropy": grad_e.tolist()}


def trl_correction(x, mode, clip_max, clip_min):
    """GRPOConfig.vllm_importance_sampling_mode: the ratio per token or per sequence (exp of the summed log
    ratio, unclamped), clamped to [C_min, C_max] (`*_truncate`) or set to 0 outside it (`*_mask`)."""
    d = (x["prox"] - x["behav"]) * x["mask"]
    if mode.startswith("sequence"):
        d = d.sum(-1, keepdim=True)
    r = d.exp()
    if mode.endswith("truncate"):
        w = r if clip_min is None and clip_max is None else r.clamp(min=clip_min, max=clip_max)
    else:
        lo = -math.inf if clip_min is None else clip_min
        hi = math.inf if clip_max is None else clip_max
        w = r.masked_fill((r < lo) | (r > hi), 0.0)
    return {"weights": (w * x["mask"]).expand_as(x["mask"]).tolist(), "loss_mask": x["mask"].tolist()}


# ---- the cases ----------------------------------------------------------------------------------------
def cases():
    """(ours: the case description `ours` reads, anchor label, inputs' names, anchor call)."""
    verl = f"verl {version('verl')}"
    trl = f"trl {version('trl')}"
    out = []

    def loss(name, agg, anchor, call, sets=("normal", "extreme"), **o):
        for s in sets:
            out.append(({"kind": "loss", "objective": {"loss": name, "agg": agg, **o}}, anchor, s, call))

    clip = {"clip_low": 0.2, "clip_high": 0.28}
    for agg in AGGS:
        loss("ppo_clip", agg, verl, lambda x, a=agg: verl_loss(x, "vanilla", a), dual_clip=3.0, **clip)
        loss("gspo_token", agg, verl, lambda x, a=agg: verl_loss(x, "gspo", a), **clip)
        loss("cispo", agg, verl, lambda x, a=agg: verl_loss(x, "cispo", a), **clip)
        loss("dppo_tv", agg, verl, lambda x, a=agg: verl_loss(x, "dppo_tv", a), dual_clip=3.0, **clip)
        loss("dppo_kl", agg, verl, lambda x, a=agg: verl_loss(x, "dppo_kl", a), dual_clip=3.0, **clip)
        loss(
            "clip_cov",
            agg,
            verl,
            lambda x, a=agg: verl_loss(x, "clip_cov", a, clip_cov_ratio=0.1),
            params={"clip_cov_ratio": 0.1, "clip_cov_lb": 1.0, "clip_cov_ub": 5.0},
            **clip,
        )
        loss(
            "kl_cov",
            agg,
            verl,
            lambda x, a=agg: verl_loss(x, "kl_cov", a, kl_cov_ratio=0.1, ppo_kl_coef=0.1),
            params={"kl_cov_ratio": 0.1, "kl_cov_coef": 0.1},
        )
        loss("dro", agg, verl, lambda x, a=agg: verl_loss(x, "dro", a, dro_beta=0.5), params={"dro_beta": 0.5})
        loss(
            "ppo_clip",
            agg,
            verl,
            lambda x, a=agg: verl_loss(x, "vanilla", a, entropy_coef=0.01),
            dual_clip=3.0,
            entropy_coef=0.01,
            **clip,
        )
    sm = "seq-mean-token-mean"
    loss("sapo", sm, verl, lambda x: verl_loss(x, "sapo", sm), params={"sapo_tau_pos": 1.0, "sapo_tau_neg": 1.05})
    loss("gmpo", sm, verl, lambda x: verl_loss(x, "geo_mean", sm, clip=(0.4, 0.4)), clip_low=0.4, clip_high=0.4)
    # TRL: its loss types are PPO-clip under an aggregation, or a loss of their own
    tm = "token-mean"
    for lt, agg in (("dapo", tm), ("bnpo", tm), ("grpo", sm), ("dr_grpo", "seq-mean-token-sum-norm")):
        loss("ppo_clip", agg, trl, lambda x, t=lt: trl_loss(x, t, delta=3.0), dual_clip=3.0, **clip)
    gspo = {"clip_low": 3e-4, "clip_high": 4e-4, "dual_clip": None}
    loss("gspo", sm, trl, lambda x: trl_loss(x, "grpo", "sequence", eps=(3e-4, 4e-4)), **gspo)
    loss("gspo", sm, trl, lambda x: trl_loss(x, "grpo", "sequence", delta=3.0), dual_clip=3.0, **clip)
    loss("gspo", "seq-mean-token-sum", trl, lambda x: trl_loss(x, "luspo", "sequence", eps=(3e-4, 4e-4)), **gspo)
    loss("cispo", tm, trl, lambda x: trl_loss(x, "cispo", eps=(0.2, 5.0)), clip_low=1.0, clip_high=4.0)
    loss("sapo", sm, trl, lambda x: trl_loss(x, "sapo"), params={"sapo_tau_pos": 1.0, "sapo_tau_neg": 1.05})
    loss("vespo", tm, trl, lambda x: trl_loss(x, "vespo"))
    loss(
        "ppo_clip", tm, trl, lambda x: trl_loss(x, "dapo", entropy_coef=0.01), dual_clip=None, entropy_coef=0.01, **clip
    )
    loss(
        "ppo_clip", tm, trl, lambda x: trl_loss(x, "dapo", top_q=0.2), dual_clip=None, entropy_top_quantile=0.2, **clip
    )
    loss(
        "ppo_clip",
        tm,
        trl,
        lambda x: trl_loss(x, "dapo", opm=0.05),
        dual_clip=None,
        off_policy_mask_threshold=0.05,
        **clip,
    )
    # estimators: verl's, on one reward per response at its last token, groups of 4 (the second group's equal)
    for credit, name, args in (
        ("reinforce_pp", "reinforce_plus_plus", {}),
        ("reinforce_pp_baseline", "reinforce_plus_plus_baseline", {}),
        ("grpo_passk", "grpo_passk", {"norm_adv_by_std_in_grpo": True}),
        ("remax", "remax", {}),
        ("grpo", "grpo", {}),
        ("rloo", "rloo", {}),
    ):
        ours = {"kind": "estimator", "credit": credit, "group_size": G}
        if credit == "grpo_passk":
            out.append(
                (
                    {**ours, "credit_args": {"scale_by_std": False}},
                    verl,
                    "normal",
                    lambda x: verl_estimator(x, "grpo_passk", norm_adv_by_std_in_grpo=False),
                )
            )
        out.append((ours, verl, "normal", lambda x, n=name, a=args: verl_estimator(x, n, **a)))
    gdpo = {"kind": "estimator", "credit": "gdpo", "group_size": G, "component_names": ["accuracy", "format"]}
    out.append((gdpo, verl, "normal", lambda x: verl_estimator(x, "gdpo")))
    out.append(
        (
            {**gdpo, "credit_args": {"weights": {"accuracy": 1.0, "format": 0.5}}},
            verl,
            "normal",
            lambda x: verl_estimator(x, "gdpo", weights=[1.0, 0.5]),
        )
    )

    # rollout correction: verl's weights, rejections and presets; TRL's modes by its formula
    def corr(mode, anchor, call, sets=("normal", "extreme"), **kw):
        for s in sets:
            out.append(({"kind": "correction", "mode": mode, **kw}, anchor, s, call))

    corr("tis", verl, lambda x: verl_correction(x, "token", 2.0), cap=2.0)
    corr("sequence_truncate", verl, lambda x: verl_correction(x, "sequence", 2.0), cap=2.0)
    corr("icepop", verl, lambda x: verl_correction(x, "token", "0.5_5.0"), cap=5.0, floor=0.5)
    corr("tis", verl, lambda x: verl_correction(x, "token", 2.0, batch_norm=True), cap=2.0, batch_norm=True)
    corr(
        "sequence_truncate",
        verl,
        lambda x: verl_correction(x, "sequence", 2.0, batch_norm=True),
        cap=2.0,
        batch_norm=True,
    )
    for mode, spec, cap, floor in (
        ("token_k1", "0.5_2.0", 2.0, 0.5),
        ("seq_sum_k1", "0.5_2.0", 2.0, 0.5),
        ("seq_mean_k1", "0.999_1.001", 1.001, 0.999),
        ("seq_mean_k1", "0.8_1.25", 1.25, 0.8),
        ("token_k2", 0.05, 0.05, None),
        ("token_k3", 0.05, 0.05, None),
        ("seq_sum_k2", 0.3, 0.3, None),
        ("seq_sum_k3", 0.3, 0.3, None),
        ("seq_mean_k2", 0.05, 0.05, None),
        ("seq_mean_k3", 0.05, 0.05, None),
        ("seq_max_k2", 0.2, 0.2, None),
        ("seq_max_k3", 0.2, 0.2, None),
    ):
        corr(mode, verl, lambda x, m=mode, s=spec: verl_correction(x, rs=m, rs_threshold=s), cap=cap, floor=floor)
    from verl.trainer.config.algorithm import RolloutCorrectionConfig

    for preset in (
        "decoupled_token_is",
        "decoupled_seq_is",
        "decoupled_token_icepop",
        "decoupled_seq_is_rs",
        "decoupled_geo_rs",
        "decoupled_geo_rs_seq_tis",
        "decoupled_geo_rs_token_tis",
    ):
        c = getattr(RolloutCorrectionConfig, preset)()
        call = lambda x, c=c: verl_correction(
            x, c.rollout_is, c.rollout_is_threshold, c.rollout_rs, c.rollout_rs_threshold, c.rollout_is_batch_normalize
        )
        corr(preset, verl, call)
    for trl_mode, mode in (
        ("token_truncate", "tis"),
        ("sequence_truncate", "sequence_truncate"),
        ("token_mask", "token_mask"),
        ("sequence_mask", "sequence_mask"),
    ):
        for cap, floor in ((3.0, None), (3.0, 0.5), (None, None)):
            corr(
                mode,
                f"{trl} (formula)",
                lambda x, m=trl_mode, c=cap, f=floor: trl_correction(x, m, c, f),
                sets=("normal",),
                cap=math.inf if cap is None else cap,
                floor=floor,
            )
    return out


VERL_SEQ_MEAN = (
    "verl's seq-mean-token-mean divides each sequence's sum by its token count + 1e-8; a one-token row whose loss "
    "is 6e3 (an extreme ratio) differs by 6e-5 there"
)


def as_case_dtype(case: dict, x: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Loss cases run in float64 on both sides (tests/algos/test_losses_parity.py: `as_case_dtype`)."""
    return {k: v.double() for k, v in x.items()} if case["kind"] == "loss" else x


def main() -> None:
    sets = {"normal": inputs(0, False), "extreme": inputs(1, True)}
    # the anchors' numbers first, before tempering is imported into this process
    runs = []
    for case, anchor, s, call in cases():
        torch.manual_seed(1234)  # clip_cov's draw: the same generator state on both sides
        runs.append(({**case, "inputs": s, "anchor": anchor, "torch_seed": 1234}, call(as_case_dtype(case, sets[s]))))
    ev = _evaluator()
    fixture_cases, parity, corr_parity = [], {}, {}
    for i, (case, theirs) in enumerate(runs):
        torch.manual_seed(1234)
        diff = ev.max_abs_diff(ev.ours(case, ev.as_case_dtype(case, sets[case["inputs"]])), theirs)
        anchor, s = case["anchor"], case["inputs"]
        name = case.get("objective", {}).get("loss") or case.get("credit") or case["mode"]
        label = name if case["kind"] != "loss" else f"{name} ({case['objective']['agg']})"
        case["id"] = f"{i}-{label}-{anchor.split()[0]}-{s}"
        if diff > 1e-6 and case["kind"] == "loss" and case["objective"]["agg"] == "seq-mean-token-mean":
            case["tolerance"] = {"max_abs_diff": 1e-4, "why": VERL_SEQ_MEAN}
        fixture_cases.append({**case, "anchor_out": theirs})
        table = corr_parity if case["kind"] == "correction" else parity
        key = f"{name} vs {anchor.split()[0]}"
        row = table.setdefault(key, {"anchor": anchor, "cases": 0, "max_abs_diff": 0.0})
        row["cases"] += 1
        row["max_abs_diff"] = max(row["max_abs_diff"], diff)
        if "tolerance" in case:
            row["by_design"] = case["tolerance"]["why"]
        flag = "" if diff <= 1e-6 else "   <-- differs"
        print(f"{case['id']}: {diff:.2e}{flag}")
    data = {
        "command": " ".join([sys.executable, *sys.argv]),
        "versions": {k: version(k) for k in ("verl", "trl", "torch")},
        "inputs": {k: {n: t.tolist() for n, t in v.items()} for k, v in sets.items()},
        "cases": fixture_cases,
    }
    FIXTURE.write_text(json.dumps(data) + "\n")
    sys.path.insert(0, str(ROOT / "examples" / "losses"))
    from page import update

    machine = f"{platform.machine()}, Python {platform.python_version()}, torch {torch.__version__}; verl {version('verl')}, trl {version('trl')}"
    update(
        ROOT / "docs" / "results",
        "parity",
        {"parity": parity, "rollout_correction_parity": corr_parity},
        data["command"],
        machine,
    )
    print(f"{len(fixture_cases)} cases -> {FIXTURE}")


if __name__ == "__main__":
    main()
