"""The update of every training verb on 2 CPU ranks (torchrun, gloo) against one process on the whole batch.

Each case builds a verb's trainer (the one loop with that verb's method) on a tiny config and trains on a
fixed set of pre-rolled groups: one process on all of them, or each rank on its share (rank r: groups
r, r + 2, ...; an odd count, so the shares are uneven). Dynamic sampling filters each share on the
credit's own signal first. The result of a case is the gradient of the update (after clipping), the
method's state and the update's metrics.

    python verb_worker.py GROUPS MODEL FRESH OUT            # one process (the reference)
    torchrun --nproc-per-node 2 verb_worker.py GROUPS MODEL FRESH OUT --strategy ddp
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import sys
from pathlib import Path

import torch

from tempering.envs.pool import PoolFamily
from tempering.envs.registry import make_family
from tempering.recipes import runner
from tempering.train.dynamic import Selection

TASK = {"family": "arithmetic", "args": {"min_value": 0, "max_value": 30}, "train_size": 40, "heldout_size": 4}
CASES = [
    "train",
    "train+dynamic_sampling",
    "train+kl",
    "rgrpo",
    "distill",
    "distill+jsd_topk",
    "direct-opd",
    "tu-opd",
    "ppo",
    "ppo+head",
    "rft",
    "pretrain",
]
STATS = (
    "policy_loss",
    "grad_norm",
    "entropy",
    "kl_ref",
    "kl_start",
    "jsd",
    "nll",
    "critic/value_loss",
    "critic/grad_norm",
)


def base(model: str, out: Path) -> dict:
    return {
        "model": {"name": model},
        "task": TASK,
        "rollout": {"group_size": 4, "prompts_per_step": 4, "max_new_tokens": 4},
        "loss": {"micro_batch_size": 3, "max_grad_norm": 0.5},
        "optim": {"lr": 1e-3},
        "run": {"steps": 1, "out_dir": str(out), "eval_every": 0, "progress": False, "tensorboard": False},
    }


def trainer(case: str, model: str, fresh: str, out: Path, world, strategy: str, loss: dict | None = None):
    cfg = base(model, out)
    cfg["loss"].update(loss or {})
    kw = {"world": world, "strategy": strategy}
    if case.startswith("train") or case == "rgrpo":
        if case == "train+dynamic_sampling":
            cfg["loss"]["dynamic_sampling"] = True
        if case == "train+kl":
            cfg["loss"]["kl_coef"] = 0.1
        family = None
        if case == "rgrpo":  # a round of Residual GRPO: GRPO on a pool family
            arith = make_family(TASK["family"], **TASK["args"])
            family = PoolFamily(arith, arith.tasks("train", 40)[:20])
        return runner.trainer("train", cfg, family=family, **kw)
    if case.startswith("ppo"):  # the critic's update runs data-parallel too (its gradients are compared)
        cfg["critic"] = {"kind": "head" if case == "ppo+head" else "model", "lr": 1e-3}
        return runner.trainer("ppo", cfg, **kw)
    if case == "rft":  # keeps the episodes with a reward above 0.5 (the others leave the loss)
        cfg["rft"] = {"min_reward": 0.5, "reject_truncated": False}
        return runner.trainer("rft", cfg, **kw)
    if case == "pretrain":  # the NLL of the given episodes' answers (here: the shared rollouts' turns)
        cfg["rollout"] = {"prompts_per_step": 4, "max_new_tokens": 4}
        return runner.trainer("pretrain", cfg, **kw)
    if case.startswith("distill"):
        cfg["teacher"] = {"path": fresh}
        if case == "distill+jsd_topk":
            cfg["distill"] = {"loss": "jsd_topk", "top_k": 8}
        return runner.trainer("distill", cfg, **kw)
    if case == "direct-opd":
        cfg["direct_opd"] = {"pairs": [{"teacher": {"path": model}, "reference": {"path": fresh}}], "top_k": 8}
        return runner.trainer("direct-opd", cfg, **kw)
    if case == "tu-opd":
        rates = out.parent / "pass_rates.json"
        ids = [t.id for t in make_family(TASK["family"], **TASK["args"]).tasks("train", 40)]
        # both unreliable on every sixth example: GRPO on the task reward there (tu_opd.empty=grpo)
        table = {i: {"a": 1.0 if k % 3 else 0.0, "b": 0.6 if k % 2 else 0.0} for k, i in enumerate(ids)}
        rates.write_text(json.dumps({"tasks": table}))
        cfg["tu_opd"] = {
            "teachers": {"a": {"path": model}, "b": {"path": fresh}},
            "pass_rates": str(rates),
            "empty": "grpo",
        }
        return runner.trainer("tu-opd", cfg, **kw)
    raise KeyError(case)


def gradients(t) -> dict[str, torch.Tensor]:
    """The policy's gradients, and those of the method's own modules (prefixed with their names)."""
    out = {}
    modules = {"": t.train_model, **{f"{n}:": own.train_module for n, own in t.owned.items()}}
    for prefix, module in modules.items():
        for name, p in module.named_parameters():
            if p.grad is None:
                continue
            g = p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
            out[prefix + name.removeprefix("module.")] = g.detach().clone().cpu()
    return out


def run(
    groups_path: str,
    model: str,
    fresh: str,
    out: Path,
    world=None,
    strategy: str = "ddp",
    cases=CASES,
    loss: dict | None = None,
) -> dict:
    """Each case's result; `loss`: keys of the loss section set in every case."""
    rank, size = (world.rank, world.size) if world is not None else (0, 1)
    groups = torch.load(groups_path, weights_only=False)
    mine = groups[rank::size]
    results = {}
    for case in cases:
        t = trainer(case, model, fresh, out / f"{case}-{strategy}-{size}", world, strategy, loss)
        share, scores = mine, None
        if t.collector.select is not None:
            batches = [t.collector.select.scored(mine, t.state)]
            chosen = Selection(batches, t.collector.select.signal(batches))
            share = [chosen.group(p) for p in chosen.picks]
            scores = chosen.scores() if share else None
        metrics = t.record(t.train_on(share or mine[:1], trainable=bool(share), scores=scores)[0])
        results[case] = {
            "grads": gradients(t),
            "state": dict(t.state),
            "metrics": {k: metrics[k] for k in STATS if k in metrics},
            "groups": len(share),
        }
    return results


def main() -> None:
    faulthandler.enable()  # a C++ abort in a rank prints every thread's Python stack
    p = argparse.ArgumentParser()
    for a in ("groups", "model", "fresh", "out"):
        p.add_argument(a)
    p.add_argument("--strategy", default=None)
    p.add_argument("--cases", default=",".join(CASES), help="comma-separated subset of the cases")
    a = p.parse_args()
    world = None
    if a.strategy:
        from tempering.train.world import close_world, init_world

        world = init_world("gloo", expected_size=2)
    res = run(a.groups, a.model, a.fresh, Path(a.out).parent, world, a.strategy or "ddp", a.cases.split(","))
    if world is None or world.is_main:
        torch.save(res, a.out)
    if world is not None:
        close_world()
        # the results are saved and the group is closed: skip interpreter teardown, where gloo's and
        # FSDP2's C++ threads have aborted a rank ("terminate called without an active exception")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
