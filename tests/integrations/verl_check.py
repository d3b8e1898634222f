"""Runs inside verl's environment (see verl_env.py): prints one JSON line comparing what verl's registries
return with tempering's own functions on the same inputs."""

import json
from dataclasses import replace

import numpy as np
import torch
from verl.trainer.ppo import core_algos

import tempering.integrations.verl as adapter
from tempering.algos.credit import TurnTensors
from tempering.algos.leap import rank_scores
from tempering.algos.losses import LossNorm, ppo_clip_loss

torch.manual_seed(0)
N, G, K, T_TURN, GAP = 3, 4, 3, 3, 2


def multi_turn_batch():
    """Rows with 1..K turns of T_TURN policy tokens and GAP env tokens; per-turn scores on the last token.
    The expected TurnTensors are built alongside, independently of the adapter's parsing."""
    T = K * (T_TURN + GAP)
    rows, uids = [], []
    scores = torch.zeros(N, G, K)
    valid = torch.zeros(N, G, K)
    for n in range(N):
        for g in range(G):
            k = int(torch.randint(1, K + 1, ()))
            mask, rew = torch.zeros(T), torch.zeros(T)
            for t in range(k):
                s = float(torch.randint(0, 5, ())) / 4  # scores in {0, .25, .5, .75, 1}
                a = t * (T_TURN + GAP)
                mask[a : a + T_TURN] = 1
                rew[a + T_TURN - 1] = s
                scores[n, g, t], valid[n, g, t] = s, 1
            rows.append((mask, rew))
            uids.append(f"prompt-{n}")
    order = torch.randperm(N * G)  # verl does not keep groups contiguous
    mask = torch.stack([rows[i][0] for i in order])
    rew = torch.stack([rows[i][1] for i in order])
    index = np.array([uids[i] for i in order], dtype=object)
    last = (valid.sum(-1).long() - 1).clamp(min=0)
    tt = TurnTensors(
        scores,
        (scores >= 1.0).float() * valid,
        valid,
        valid * T_TURN,
        scores.gather(2, last[..., None]).squeeze(-1),
        torch.zeros_like(scores),
        torch.zeros_like(scores),
    )
    return mask, rew, index, order, tt


def expected_tokens(adv_NGK, mask, order):
    out = torch.zeros_like(mask)
    for row, src in enumerate(order.tolist()):
        n, g = divmod(src, G)
        for t in range(K):
            a = t * (T_TURN + GAP)
            out[row, a : a + T_TURN] = adv_NGK[n, g, t] * mask[row, a : a + T_TURN]
    return out


report = {"transformers": __import__("transformers").__version__}
report["registered_by_plugin"] = (
    all(core_algos.get_adv_estimator_fn(f"tempering_{n}").__name__ == f"tempering_{n}" for n in adapter.VERL_CREDIT)
    and core_algos.get_policy_loss_fn("tempering_ppo_clip") is adapter.ppo_clip_policy_loss
)
report["estimators"] = sorted(k for k in core_algos.ADV_ESTIMATOR_REGISTRY if k.startswith("tempering_"))

mask, rew, index, order, tt = multi_turn_batch()
diffs = {}
for name, fn in adapter.VERL_CREDIT.items():
    got, _ = core_algos.get_adv_estimator_fn(f"tempering_{name}")(
        token_level_rewards=rew, response_mask=mask, index=index, config=None
    )
    if name == "leap":  # LEAP's credit passes its group reward back: the rank tournament of each group
        ranked = rank_scores(tt.success_NG, tt.first_success_NG, tt.tokens_NGK.sum(-1))
        want = expected_tokens(fn(replace(tt, group_NG=ranked)), mask, order)
    else:
        want = expected_tokens(fn(tt), mask, order)
    diffs[f"tempering_{name}"] = float((got - want).abs().max())
report["estimator_max_diff"] = diffs

# single-turn outcome rewards: tempering's GRPO next to verl's own
T = 6
lens = torch.randint(1, T + 1, (N * G,))
mask1 = (torch.arange(T)[None, :] < lens[:, None]).float()
rew1 = torch.zeros(N * G, T)
rew1[torch.arange(N * G), lens - 1] = torch.randint(0, 2, (N * G,)).float()
index1 = np.array([f"p{i // G}" for i in range(N * G)], dtype=object)
ours, _ = core_algos.get_adv_estimator_fn("tempering_grpo")(
    token_level_rewards=rew1, response_mask=mask1, index=index1, config=None
)
theirs, _ = core_algos.get_adv_estimator_fn("grpo")(
    token_level_rewards=rew1, response_mask=mask1, index=index1, config=None
)
report["grpo_vs_verl_grpo"] = float((ours - theirs).abs().max())

# the policy loss: verl's registry vs tempering's function vs verl's vanilla PPO loss
from omegaconf import OmegaConf  # noqa: E402

B, T = 6, 7
old = torch.randn(B, T) * 0.3 - 1.5
new = old + torch.randn(B, T) * 0.2
adv = torch.randn(B, T)
m = (torch.rand(B, T) > 0.3).float()
info = {"dp_size": 2, "batch_num_tokens": int(m.sum()) * 2 + 3, "global_batch_size": B * 2}
cfg = OmegaConf.create(
    {"clip_ratio": 0.2, "clip_ratio_low": 0.2, "clip_ratio_high": 0.28, "clip_ratio_c": 3.0, "global_batch_info": info}
)
loss, _ = core_algos.get_policy_loss_fn("tempering_ppo_clip")(
    old_log_prob=old,
    log_prob=new,
    advantages=adv,
    response_mask=m,
    loss_agg_mode="token-mean",
    config=cfg,
    rollout_is_weights=None,
)
norm = LossNorm(tokens=info["batch_num_tokens"] / 2, seqs=info["global_batch_size"] / 2, max_len=T)
want, _ = ppo_clip_loss(new, old, adv, m, 0.2, 0.28, 3.0, "token-mean", norm)
report["loss_vs_tempering"] = float((loss - want).abs())
vanilla, _ = core_algos.get_policy_loss_fn("vanilla")(
    old_log_prob=old,
    log_prob=new,
    advantages=adv,
    response_mask=m.bool(),
    loss_agg_mode="token-mean",
    config=cfg,
    rollout_is_weights=None,
)
report["loss_vs_verl_vanilla"] = float((loss - vanilla).abs())
print(json.dumps(report))
