"""Rollout correction results: docs/results/offpolicy.{md,json}.

    .venv/bin/python benchmarks/offpolicy.py

For every mode of `loss.rollout_correction`:

- `parity_max_abs_diff`: the largest |ours - anchor| over the weights and loss masks of the mode's stored
  cases (tests/data/offpolicy_parity.json, from benchmarks/offpolicy_parity.py: verl 0.9.1 and AReaL 1.0.4
  called, TRL 1.16 by its documented formula) and, for `decoupled`, AReaL's PPO loss;
- `reduces_to_on_policy_at_staleness_0`: a tiny model's update with the mode has the same gradient as the
  uncorrected one when the behaviour policy is the trainer itself (weights exactly 1, mask unchanged,
  gradients equal); beside it, with the HF sampler's own recorded log-probs (staleness 0 through the real
  sampler), the largest |w - 1| on a loss token and whether the mask stayed whole.

And `top_k_bias`: the same staleness-0 batch sampled with top_k=5, where the sampler's log-probs are of the
filtered distribution: the mean tis weight and mismatch_kl show why the config refuses the combination.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch

from tempering.algos.correction import MODES, rollout_correction
from tempering.algos.losses import LossNorm, ppo_clip_loss
from tempering.experiments import conditions, conditions_text, machine, write_results
from tempering.models.tiny import tiny_model
from tempering.models.tokenizer import char_tokenizer
from tempering.rollout.sampler import HFSampler, SamplingParams
from tempering.train.batch import TrainBatch
from tempering.train.loop import training_batch
from tempering.train.method import Credit
from tempering.train.scoring import Scores
from tempering.train.update import UpdateSettings, batch_logprobs, ppo_loss

ROOT = Path(__file__).resolve().parents[1]
PARITY = ROOT / "tests" / "data" / "offpolicy_parity.json"
PROMPTS = ["12+7=", "3*4=", "40-13=", "9+9="]
G, NEW_TOKENS, SEED = 4, 8, 0


def parity() -> dict[str, dict]:
    data = json.loads(PARITY.read_text())
    x = {k: torch.tensor(v) for k, v in data["inputs"].items()}
    out: dict[str, dict] = {}
    for c in data["cases"]:
        w, mask, _ = rollout_correction(x["prox_logp"], x["behav_logp"], x["mask"], c["mode"], c["cap"], c["floor"])
        diff = max(
            float((w - torch.tensor(c["weights"])).abs().max()),
            float((mask - torch.tensor(c["loss_mask"])).abs().max()),
        )
        if "loss" in c:
            adv = torch.tensor(c["advantages"])
            loss, _ = ppo_clip_loss(torch.tensor(c["current"]), x["prox_logp"], adv * w, mask, 0.2, 0.28, 3.0)
            diff = max(diff, abs(float(loss) - c["loss"]))
        m = out.setdefault(c["mode"], {"parity_max_abs_diff": 0.0, "anchors": [], "cases": 0})
        m["parity_max_abs_diff"] = max(m["parity_max_abs_diff"], diff)
        m["cases"] += 1
        label = f"{c['anchor']} ({c['source']})"
        if label not in m["anchors"]:
            m["anchors"].append(label)
    return out


def sampled_batch(model, tok, top_k: int = 0) -> TrainBatch:
    """G samples per prompt from the HF sampler, with the log-probs it recorded as the behaviour policy's."""
    sampler = HFSampler(model, tok, seed=SEED)
    prompts = [tok.encode(p) for p in PROMPTS for _ in range(G)]
    samples = sampler.sample(prompts, SamplingParams(max_new_tokens=NEW_TOKENS, temperature=1.0, top_k=top_k))
    T = max(len(p) + len(s.ids) for p, s in zip(prompts, samples, strict=True))
    B = len(prompts)
    ids = torch.full((B, T), tok.pad_token_id, dtype=torch.long)
    attn, mask, logp = torch.zeros(B, T, dtype=torch.long), torch.zeros(B, T), torch.zeros(B, T)
    for b, (p, s) in enumerate(zip(prompts, samples, strict=True)):
        n = len(p) + len(s.ids)
        ids[b, :n] = torch.tensor(p + s.ids)
        attn[b, :n] = 1
        mask[b, len(p) : n] = 1.0
        logp[b, len(p) : n] = torch.tensor(s.logprobs)
    turn = torch.where(mask > 0, 0, -1)
    adv = torch.randn(B, 1, generator=torch.Generator().manual_seed(SEED)).expand(B, T) * mask
    return TrainBatch(ids, attn, mask, logp, turn, episode_B=torch.arange(B), adv_BT=adv.contiguous())


def gradient(model, batch: TrainBatch, scores: Scores) -> list[torch.Tensor]:
    model.zero_grad()
    tb = training_batch(batch, scores, Credit(batch.adv_BT))
    loss, _ = ppo_loss(model, tb, LossNorm.of(tb.mask_BT), UpdateSettings())
    loss.backward()
    return [p.grad.detach().clone() for p in model.parameters() if p.grad is not None]


def max_diff(g: list[torch.Tensor], h: list[torch.Tensor], relative: bool = False) -> float:
    d = max(float((a - b).abs().max()) for a, b in zip(g, h, strict=True))
    return d / max(float(b.abs().max()) for b in h) if relative else d


def staleness_0(model, batch: TrainBatch) -> dict[str, dict]:
    """Against two references: the uncorrected update (its old log-probs are the training forward's own,
    detached), and the update with the proximal log-probs and every weight 1 (what a mode must reduce to;
    the two differ only by the recomputation's float noise)."""
    prox = batch_logprobs(model, batch, 256)
    none = gradient(model, batch, Scores(turns=None))  # type: ignore[arg-type]
    unit = Scores(turns=None, correction_BT=batch.mask_BT, correction_mask_BT=batch.mask_BT, proximal_logp_BT=prox)  # type: ignore[arg-type]
    ones = gradient(model, batch, unit)
    out = {}
    for mode in MODES:
        row: dict = {}
        for name, behav in (("exact", prox), ("sampler", batch.sample_logp_BT)):
            w, mask, stats = rollout_correction(prox, behav, batch.mask_BT, mode, episode_B=batch.episode_B)
            on = batch.mask_BT > 0
            scores = Scores(turns=None, correction_BT=w, correction_mask_BT=mask, proximal_logp_BT=prox)  # type: ignore[arg-type]
            g = gradient(model, batch, scores)
            row[name] = {
                "max_abs_weight_minus_1": float((w[on] - 1).abs().max()),
                "mask_unchanged": bool(torch.equal(mask, batch.mask_BT)),
                "max_abs_grad_diff_vs_unit_weights": max_diff(g, ones),
                "max_rel_grad_diff_vs_uncorrected": max_diff(g, none, relative=True),
                "mismatch_kl": stats["mismatch_kl"],
            }
        e = row["exact"]
        row["reduces"] = (
            e["max_abs_weight_minus_1"] == 0.0
            and e["mask_unchanged"]
            and e["max_abs_grad_diff_vs_unit_weights"] == 0.0
            and e["max_rel_grad_diff_vs_uncorrected"] <= 1e-5
        )
        out[mode] = row
    return out


def top_k_bias(model, tok) -> dict[str, float]:
    batch = sampled_batch(model, tok, top_k=5)
    prox = batch_logprobs(model, batch, 256)
    w, _, stats = rollout_correction(prox, batch.sample_logp_BT, batch.mask_BT, "tis")
    on = batch.mask_BT > 0
    return {
        "top_k": 5,
        "tis_mean_weight": float(w[on].mean()),
        "share_of_tokens_with_weight_below_1": float((w[on] < 1 - 1e-6).float().mean()),
        "mismatch_kl": stats["mismatch_kl"],
    }


def markdown(d: dict) -> str:
    lines = [
        "# Rollout correction: parity with the anchors and the on-policy limit",
        "",
        f"Command: `{d['command']}`. Machine: {d['machine']}; {d['conditions_text']}. Seed {d['seed']}.",
        "",
        "Parity: each mode's weights and loss mask against the anchors' on the stored inputs of "
        "`tests/data/offpolicy_parity.json` (7 rows of up to 8 tokens, one empty), written once by "
        "`benchmarks/offpolicy_parity.py` with verl 0.9.1's and AReaL 1.0.4's functions called; TRL 1.16 "
        "computes its weights inline in `GRPOTrainer` (no function to call alone), so its cases follow the formula "
        "its `GRPOConfig` documents (`formula`). For `decoupled` the difference also covers AReaL's PPO loss.",
        "",
        f"Staleness 0: a tiny model (`tiny-s`, {len(PROMPTS)} prompts x {G} samples of up to {NEW_TOKENS} tokens). "
        "`exact`: the behaviour policy is the trainer itself; the mode reduces to the on-policy update when every "
        "weight is exactly 1, the mask is whole, the gradient equals that of unit weights exactly, and the "
        "uncorrected update's (whose old log-probs are the training forward's own rather than recomputed) to a "
        "relative 1e-5. `HF sampler`: the log-probs the sampler recorded while drawing the batch.",
        "",
        "| mode | anchors | cases | parity max abs diff | reduces to on-policy at staleness 0 | "
        "exact: rel grad diff vs uncorrected | HF sampler: max abs (w - 1) | HF sampler: mask whole | "
        "HF sampler: rel grad diff vs uncorrected |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for mode, m in d["modes"].items():
        e, s = d["staleness_0"][mode]["exact"], d["staleness_0"][mode]["sampler"]
        lines.append(
            f"| `{mode}` | {'; '.join(m['anchors'])} | {m['cases']} | {m['parity_max_abs_diff']:.1e} | "
            f"{'yes' if m['reduces_to_on_policy_at_staleness_0'] else 'no'} | "
            f"{e['max_rel_grad_diff_vs_uncorrected']:.1e} | {s['max_abs_weight_minus_1']:.1e} | "
            f"{'yes' if s['mask_unchanged'] else 'no'} | {s['max_rel_grad_diff_vs_uncorrected']:.1e} |"
        )
    t = d["top_k_bias"]
    lines += [
        "",
        f"Top-k: the same staleness-0 batch sampled with top_k={t['top_k']}: tis mean weight "
        f"{t['tis_mean_weight']:.3f}, {100 * t['share_of_tokens_with_weight_below_1']:.0f}% of the tokens weighted "
        f"below 1, mismatch_kl {t['mismatch_kl']:.3g} (the sampler's log-probs are of the filtered distribution, "
        "the trainer's of the whole one), which is why a correction with top-k / top-p sampling is refused when "
        "the config is read.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    t0, start = time.perf_counter(), conditions()
    torch.manual_seed(SEED)
    tok = char_tokenizer()
    model = tiny_model("tiny-s", seed=SEED)
    batch = sampled_batch(model, tok)
    par, s0 = parity(), staleness_0(model, batch)
    modes = {
        mode: {**par[mode], "reduces_to_on_policy_at_staleness_0": s0[mode]["reduces"]}
        for mode in MODES  # a mode without a stored case would fail here, loudly
    }
    end = conditions()
    data = {
        "command": " ".join([".venv/bin/python", *sys.argv]),
        "seed": SEED,
        "machine": machine(),
        "conditions": {"start": start, "end": end},
        "conditions_text": conditions_text(start, end),
        "modes": modes,
        "staleness_0": s0,
        "top_k_bias": top_k_bias(model, tok),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    md, old = markdown(data), ROOT / "docs" / "results" / "offpolicy.json"
    if old.is_file() and "experiment" in (prev := json.loads(old.read_text())):  # offpolicy_experiment.py's part
        data.update({k: prev[k] for k in ("experiment", "seeds", "claims") if k in prev})
        md = md.rstrip("\n") + "\n\n## Experiment" + (old.with_suffix(".md").read_text().split("\n## Experiment")[1])
    write_results(ROOT / "docs" / "results", "offpolicy", md, data)
    print(md)


if __name__ == "__main__":
    main()
