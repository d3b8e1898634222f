"""Group-level rewards: a family's own, LEAP's tournament against the paper's definition, wrappers forwarding
them, and a config asking for one the family does not define."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import ClassVar

import pytest
import torch

from tempering.algos.credit import resolve_credit
from tempering.config import build
from tempering.envs.arithmetic import ArithmeticFamily
from tempering.envs.base import TaskFamily
from tempering.envs.group import GroupReward, rank
from tempering.envs.mixture import MixtureFamily
from tempering.envs.pool import PoolFamily
from tempering.errors import UserError
from tempering.methods.rl import TrainConfig
from tempering.methods.rl import build as build_rl
from tempering.train.batch import collate
from tempering.train.method import Context
from tempering.train.scoring import GroupRewards, Scores, score
from tempering.types import Episode, Group, Task, Turn


def episode(task: Task, turns: list[tuple[bool, int]], reward: float = 0.0) -> Episode:
    """An episode of (accepted?, answer tokens) turns."""
    ts = [Turn(action_ids=[5] * n, logprobs=[0.0] * n, success=ok, score=float(ok)) for ok, n in turns]
    return Episode(task=task, prompt_ids=[1, 2], turns=ts, reward=reward)


def best_only(episodes: Sequence[Episode]) -> list[float]:
    """1 for the group's shortest successful episode, 0 for the others."""
    ok = [(e.num_action_tokens, i) for i, e in enumerate(episodes) if e.success]
    best = min(ok)[1] if ok else None
    return [float(i == best) for i in range(len(episodes))]


@dataclass
class Shortest(ArithmeticFamily):
    group_rewards: ClassVar[dict[str, GroupReward]] = {"best_only": best_only}


def paper_rank(episodes: Sequence[Episode], tokens: bool) -> list[float]:
    """LEAP's s_i = 1/(G-1) sum_{j != i} sign(key_i - key_j), key = (success, -first success turn[, -tokens]),
    the later keys read only between two successes."""

    def key(e: Episode) -> tuple:
        if not e.success:
            return (0,)
        return (1, -e.first_success_turn, -e.num_action_tokens if tokens else 0)

    sign = lambda a, b: (a > b) - (a < b)
    G = len(episodes)
    return [sum(sign(key(a), key(b)) for b in episodes if b is not a) / (G - 1) for a in episodes]


TASK = Task("t0", "1+1=", "2", family="arithmetic")
GROUP = [
    episode(TASK, [(True, 3)]),  # first-turn success
    episode(TASK, [(False, 2), (True, 2)]),  # second-turn success, as many tokens
    episode(TASK, [(False, 2), (True, 5)]),  # second-turn success, longer
    episode(TASK, [(False, 4), (False, 1), (False, 1)]),  # failure
    episode(TASK, [(True, 1)]),  # first-turn success, shorter
]


@pytest.mark.parametrize("tokens", [False, True])
def test_rank_is_leaps_tournament(tokens):
    got = rank(token_efficiency=tokens)(GROUP)
    assert got == pytest.approx(paper_rank(GROUP, tokens))
    assert sum(got) == pytest.approx(0.0)
    assert got[3] == -1.0  # the failure loses to every success
    assert (got[0] == got[4]) != tokens  # two first-turn successes tie unless tokens break it


def scored(family: TaskFamily, name: str) -> tuple[list[Group], Scores]:
    other = Task("t1", "2+2=", "4", family="arithmetic")
    groups = [
        Group(TASK, [episode(TASK, [(True, 4)], 1.0), episode(TASK, [(True, 2)], 1.0), episode(TASK, [(False, 1)])]),
        Group(other, [episode(other, [(False, 3)]), episode(other, [(True, 2)], 1.0), episode(other, [(False, 2)])]),
    ]
    fn = family.group_reward(name)
    assert fn is not None
    batch = collate([e for g in groups for e in g.episodes], pad_id=0)
    return groups, score(groups, batch, [GroupRewards(fn)])


def test_a_familys_own_group_reward_is_added_to_each_episodes_reward():
    groups, s = scored(Shortest(), "best_only")
    assert s.turns.group_NG.tolist() == [[0.0, 1.0, 0.0], [0.0, 1.0, 0.0]]
    assert s.metrics["group_reward_abs"] == pytest.approx(2 / 6)
    # outcome credit sees reward + group reward: GRPO on (1, 2, 0) and (0, 2, 0)
    adv = resolve_credit("grpo", {})(s.turns)[..., 0]
    want = torch.tensor([[1.0, 2.0, 0.0], [0.0, 2.0, 0.0]])
    want = (want - want.mean(-1, keepdim=True)) / (want.std(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(adv, want)
    # dynamic sampling keeps a group's scores with its group reward
    batch = collate([e for g in groups for e in g.episodes], pad_id=0)
    kept = s.select([1], groups, batch)
    assert kept.turns.group_NG.tolist() == [[0.0, 1.0, 0.0]] and kept.metrics["group_reward_abs"] == pytest.approx(
        1 / 3
    )
    both = Scores.join([(groups[:1], s.select([0], groups, batch)), (groups[1:], s.select([1], groups, batch))])
    assert both.turns.group_NG.tolist() == s.turns.group_NG.tolist()


def test_a_family_without_one_has_only_the_shared_ones():
    fam = ArithmeticFamily()
    assert fam.group_reward("best_only") is None and fam.group_reward("rank") is not None


def test_wrappers_forward_the_group_reward_of_the_wrapped_family():
    own = Shortest()
    pool = PoolFamily(own, own.tasks("train", 3))
    assert pool.group_reward("best_only") is best_only
    assert PoolFamily(ArithmeticFamily(), []).group_reward("best_only") is None
    mix = MixtureFamily({"add": {"family": "arithmetic"}, "rev": {"family": "strings", "args": {"ops": ["rev"]}}})
    assert mix.group_reward("best_only") is None  # no member defines it
    mix.families["add"] = Shortest()
    assert mix.group_reward("best_only") is None  # one member does not
    mix.families["rev"] = Shortest()
    fn = mix.group_reward("best_only")
    assert fn is not None
    g = [episode(Task("a", "", family="rev"), [(True, 3)]), episode(Task("a", "", family="rev"), [(True, 1)])]
    assert fn(g) == [0.0, 1.0]
    # the shared tournament per member: each group's own
    tournament = mix.group_reward("rank")
    added = [replace(e, task=replace(e.task, family="add")) for e in GROUP]
    assert tournament is not None and tournament(added) == rank()(GROUP)


def context(cfg: TrainConfig, family: TaskFamily) -> Context:
    return Context(cfg, None, None, None, family, [], [], {}, None, None, None)


def test_the_rl_method_scores_the_asked_group_reward_first():
    cfg = build(TrainConfig, {"loss": {"group_reward": "best_only", "overlong_cache": 2}})
    method = build_rl(context(cfg, Shortest()))
    first = method.scorers[0]
    assert isinstance(first, GroupRewards) and first.reward is best_only
    assert first in method.filter_scorers  # dynamic sampling reads it before its filter
    leap = build(TrainConfig, {"rollout": {"max_turns": 2}, "loss": {"advantage": "leap"}})
    assert isinstance(build_rl(context(leap, ArithmeticFamily())).scorers[0], GroupRewards)
    assert not any(isinstance(s, GroupRewards) for s in build_rl(context(build(TrainConfig, {}), Shortest())).scorers)


def test_a_group_reward_the_family_does_not_define_is_refused_naming_both_keys():
    cfg = build(TrainConfig, {"loss": {"group_reward": "best_only"}})
    with pytest.raises(UserError) as e:
        build_rl(context(cfg, ArithmeticFamily()))
    msg = str(e.value)
    assert "\n" not in msg and "loss.group_reward=best_only" in msg and "task.family=arithmetic" in msg


def test_leaps_old_token_tie_break_key_points_at_the_group_reward():
    with pytest.raises(Exception, match="loss.group_reward=rank_tokens"):
        build(TrainConfig, {"loss": {"advantage": "leap", "credit_args": {"token_efficiency": True}}})
