"""Every RL credit x {overlong, kl_in_reward, dynamic_sampling} x {single-, multi-turn}, on fixed groups.

Each combination is built through the RL method's builder (the same scorers and credit `tempering
train` runs) and is either refused when the config is read, or changes what is trained on as
documented in `algos/credit.py`:
- overlong / kl_in_reward: the advantages equal the credit applied with the documented per-turn
  shaping term (DAPO's ramp on each answer's length; -beta * each turn's summed k1 KL), and differ
  from the advantages without it;
- dynamic_sampling: the advantages are unchanged and exactly the groups whose advantages are all zero
  are dropped (at least one, and at least one kept).
Anything else is a silent no-op. Used by tests/methods/test_composition.py and run.py (the results).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from tempering.algos.credit import CREDIT, turn_tensors
from tempering.algos.losses import kl_estimate
from tempering.algos.shaping import overlong_penalty
from tempering.config import build
from tempering.envs.registry import make_family
from tempering.errors import ConfigError
from tempering.methods import rl
from tempering.methods.rl import TrainConfig
from tempering.models import char_tokenizer, tiny_model
from tempering.train.batch import TrainBatch, broadcast_turn_adv, collate
from tempering.train.method import Context, zero_signal_groups
from tempering.train.scoring import per_turn, score
from tempering.train.update import batch_logprobs
from tempering.types import Episode, Group, Task, Turn

OPTIONS: dict[str, dict[str, Any]] = {
    "overlong": {"overlong_cache": 4},
    "kl_in_reward": {"kl_coef": 0.5, "kl_in_reward": True},
    "dynamic_sampling": {"dynamic_sampling": True},
}
MAX_NEW = 8
G = 4


def _episode(task: Task, turns: list[tuple[int, float, bool]], seed: int) -> Episode:
    g = torch.Generator().manual_seed(seed)
    out = []
    for n, s, ok in turns:
        ids = torch.randint(4, 30, (n,), generator=g).tolist()
        parts = {"correct": float(ok), "score": s}  # two reward functions' values, which GDPO reads
        out.append(
            Turn(ids, [-0.3 - 0.1 * (i % 3) for i in range(n)], [5, 6], score=s, success=ok, info={"rewards": parts})
        )
    out[-1].feedback_ids = []
    e = Episode(task, [1, 2, 3], out, stop_reason="success" if turns[-1][2] else "max_turns")
    e.reward = out[-1].score
    return e


def groups(turns: int) -> list[Group]:
    """Three groups: mixed outcomes and lengths, one best episode (a tie at the top carries no pass@k signal); four identical episodes that end after one turn (no
    signal for any credit);
    every episode equally rewarded (single-turn: same score, other lengths; multi-turn: every episode
    succeeds, at different turns, the case outcome credit cannot tell apart and LEAP can). Each group's greedy
    episode (ReMax's baseline) scores as its first episode does."""
    t = [Task(f"t{i}", "") for i in range(3)]
    if turns == 1:
        mixed = [[(7, 1.0, True)], [(2, 0.0, False)], [(8, 0.5, False)], [(5, 0.9, False)]]
        equal = [[(3, 1.0, True)], [(6, 1.0, True)], [(8, 1.0, True)], [(4, 1.0, True)]]
    else:
        mixed = [
            [(7, 0.2, False), (6, 1.0, True)],
            [(2, 0.0, False), (3, 0.0, False), (8, 0.5, False)],
            [(8, 0.9, False)],
            [(5, 0.4, False), (8, 0.6, False), (2, 0.1, False)],
        ]
        equal = [
            [(3, 1.0, True)],
            [(6, 0.3, False), (5, 1.0, True)],
            [(8, 0.2, False), (4, 0.5, False), (7, 1.0, True)],
            [(2, 1.0, True)],
        ]
    same = [[(4, 0.5, False)]] * G if turns == 1 else [[(4, 1.0, True)]] * G
    return [
        Group(task, [_episode(task, eps[i], 10 * k + i) for i in range(G)], greedy=_episode(task, eps[0], 10 * k + G))
        for k, (task, eps) in enumerate(zip(t, [mixed, same, equal]))
    ]


def _config(credit: str, turns: int, option: dict[str, Any]) -> TrainConfig:
    return build(
        TrainConfig,
        {
            "model": {"name": "tiny-xs"},
            "rollout": {"group_size": G, "max_new_tokens": MAX_NEW, "max_turns": turns},
            "loss": {"advantage": credit, **option},
        },
    )


def _advantages(cfg: TrainConfig, gs: list[Group], start: torch.nn.Module):
    family = make_family(cfg.task.family, **cfg.task.args)
    ctx = Context(cfg, start, char_tokenizer(), None, family, [], [], {}, None, None, None, load_start=lambda: start)  # type: ignore[arg-type]
    method = rl.build(ctx)
    batch = collate([e for g in gs for e in g.episodes], 0)
    scores = score(gs, batch, method.scorers)
    return method, batch, scores, method.credit(scores, batch, {}).adv_BT


def _documented(credit: str, option: str, batch: TrainBatch, gs: list[Group], start) -> torch.Tensor:
    """The advantages the docs promise: the credit on the verifier's scores plus the option's per-turn term."""
    t = turn_tensors(gs)
    if option == "overlong":
        term = overlong_penalty(t.tokens_NGK, MAX_NEW, OPTIONS["overlong"]["overlong_cache"]) * t.valid_NGK
    else:
        ref = batch_logprobs(start, batch, 256)
        k1 = kl_estimate(batch.sample_logp_BT, ref, "k1") * batch.mask_BT
        term = -OPTIONS["kl_in_reward"]["kl_coef"] * per_turn(k1, batch, t.scores_NGK.shape)
    adv_NGK = CREDIT[credit](replace(t, shaping_NGK=term))
    return broadcast_turn_adv(adv_NGK.reshape(-1, adv_NGK.shape[-1]), batch)


def check(credit: str, option: str, turns: int, start: torch.nn.Module) -> dict[str, Any]:
    """One combination: {status: refused | effective | noop, detail}."""
    try:
        cfg = _config(credit, turns, OPTIONS[option])
    except ConfigError as e:
        return {"status": "refused", "detail": str(e).splitlines()[-1].strip()}
    gs = groups(turns)
    _, batch, _, base = _advantages(_config(credit, turns, {}), gs, start)
    method, _, _, adv = _advantages(cfg, gs, start)
    if option == "dynamic_sampling":
        zero = zero_signal_groups(adv, batch, G)
        expect = torch.tensor([bool((adv[batch.episode_B // G == n].abs() == 0).all()) for n in range(len(gs))])
        ok = (
            method.resample_rounds is not None
            and torch.equal(adv, base)
            and torch.equal(zero, expect)
            and bool(zero.any())
            and not bool(zero.all())
        )
        dropped = [n for n, z in enumerate(zero.tolist()) if z]
        return {"status": "effective" if ok else "noop", "detail": f"groups dropped: {dropped}"}
    want = _documented(credit, option, batch, gs, start)
    changed = not torch.allclose(adv, base, atol=1e-6)
    as_documented = torch.allclose(adv, want, atol=1e-5)
    ok = changed and as_documented
    delta = float((adv - base).abs().max())
    return {
        "status": "effective" if ok else "noop",
        "detail": f"max |change| {delta:.3f}, as documented: {as_documented}",
    }


def matrix() -> list[dict[str, Any]]:
    start = tiny_model("tiny-xs", seed=0).eval()
    rows = []
    for credit in sorted(CREDIT):
        for option in OPTIONS:
            for turns in (1, 3):
                rows.append({"credit": credit, "option": option, "turns": turns, **check(credit, option, turns, start)})
    return rows
