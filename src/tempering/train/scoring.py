"""The scoring stage, between rollout and credit: the one place where rewards are formed.

`Scores` holds what is known about a batch once it is scored: the verifier's per-turn scores (from the
episodes), a task family's group-level reward (`turns.group_NG`, per group, added to each episode's reward),
each shaping term by name (kept apart, summed into `turns.shaping_NGK`, and logged), the
reference policy's log-probs, the teachers' views of the student's tokens, and the rollout correction.
A scorer is a function `(groups, batch, scores) -> scores` that returns a new record with its part
added; scorers never change episodes or the batch. Every change to a reward shows in `metrics`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

import torch

from tempering.algos.correction import bypasses, rollout_correction
from tempering.algos.credit import TurnTensors, turn_tensors
from tempering.algos.losses import kl_estimate
from tempering.algos.shaping import overlong_penalty
from tempering.envs.group import GroupReward
from tempering.models.chat import ChatFormat
from tempering.teachers.base import Teacher, TeacherScores
from tempering.teachers.prompts import PromptBuilder, score_episodes
from tempering.train.batch import TrainBatch
from tempering.train.prefix import packed_values
from tempering.train.update import batch_logprobs, on_device
from tempering.types import Group, Task


@dataclass(frozen=True)
class Scores:
    """Everything the scoring stage computed for one batch (rows follow `TrainBatch`)."""

    turns: TurnTensors
    """Verifier scores per (group, episode, turn), outcome rewards, and the summed shaping terms."""
    task_ids: tuple[str, ...] = ()
    """The task of each episode, in batch order (groups flattened)."""
    terms: dict[str, torch.Tensor] = field(default_factory=dict)
    """Each shaping term by name, per (group, episode, turn); already summed into `turns.shaping_NGK`."""
    ref_logp_BT: torch.Tensor | None = None
    """The reference policy's log-probs of the sampled tokens (KL loss or KL-in-reward)."""
    teachers: dict[str, TeacherScores] = field(default_factory=dict)
    """Teachers' views of the student's tokens, aligned with the batch."""
    proximal_logp_BT: torch.Tensor | None = None
    """The proximal policy's log-probs of the sampled tokens: the trainer's own, recomputed before the update
    when the sampler (the behaviour policy) is not the trainer (rollout correction)."""
    correction_BT: torch.Tensor | None = None
    """Per-token weights of the rollout correction on the advantages (0 where a token or episode is masked)."""
    correction_mask_BT: torch.Tensor | None = None
    """The loss mask after the correction (smaller only for the rejection modes)."""
    extras: dict[str, torch.Tensor] = field(default_factory=dict)
    """What a method's own scorers add, by name, for its own credit (PPO's critic values `values`,
    rejection fine-tuning's kept episodes `keep`)."""
    metrics: dict[str, float] = field(default_factory=dict)

    @classmethod
    def of(cls, groups: list[Group]) -> Scores:
        """The verifier's scores, as the episodes carry them."""
        return cls(turns=turn_tensors(groups), task_ids=tuple(e.task.id for g in groups for e in g.episodes))

    def with_term(self, name: str, term_NGK: torch.Tensor) -> Scores:
        """A shaping term added to the turns it belongs to (and logged as its mean per episode)."""
        t = self.turns
        term = term_NGK.float() * t.valid_NGK
        turns = replace(t, shaping_NGK=term if t.shaping_NGK is None else t.shaping_NGK + term)
        per_episode = float(term.sum(-1).mean())
        return replace(
            self,
            turns=turns,
            terms={**self.terms, name: term},
            metrics={**self.metrics, f"shaping/{name}": per_episode},
        )

    def with_group_reward(self, group_NG: torch.Tensor) -> Scores:
        """Each episode's group-level reward (`TurnTensors.group_NG`), added to its reward, and logged as its
        mean |value| per episode (`group_reward_abs`: a tournament's values sum to 0)."""
        g = group_NG.float()
        out = replace(self, turns=replace(self.turns, group_NG=g))
        return out.with_metrics(group_reward_abs=float(g.abs().mean()))

    def with_extra(self, **tensors: torch.Tensor) -> Scores:
        return replace(self, extras={**self.extras, **tensors})

    def with_metrics(self, **m: float) -> Scores:
        return replace(self, metrics={**self.metrics, **m})

    def select(self, keep: Sequence[int], groups: Sequence[Group], batch: TrainBatch) -> Scores:
        """The scores of the groups `keep` (indices into `groups`, the groups this record scored as `batch`, in
        order), taken from this record, not recomputed: each group's turn scores and shaping terms, the
        reference's log-probs of its rows (as wide as the kept rows' longest, the kept groups' own batch). The
        verifier's, the group reward's and the shaping metrics are the kept groups'; other metrics stay this record's. Teachers,
        a method's extras and the rollout correction are the update's to compute on what it trains."""
        if self.teachers or self.extras or self.proximal_logp_BT is not None or self.correction_BT is not None:
            raise ValueError("Scores.select takes verifier scores, shaping terms and reference log-probs only")
        kept = [groups[i] for i in keep]
        out = Scores.of(kept)
        K = out.turns.scores_NGK.shape[-1]
        for name, term in self.terms.items():
            out = out.with_term(name, torch.stack([_fit(term[i], K) for i in keep]))
        if self.turns.group_NG is not None:
            out = out.with_group_reward(self.turns.group_NG[list(keep)])
        if self.ref_logp_BT is not None:
            assert batch.episode_B is not None
            starts = [sum(len(g.episodes) for g in groups[:i]) for i in range(len(groups) + 1)]
            rows = torch.cat(
                [((batch.episode_B >= starts[i]) & (batch.episode_B < starts[i + 1])).nonzero().flatten() for i in keep]
            )
            ref = self.ref_logp_BT[rows] * batch.attention_BT[rows]
            out = replace(out, ref_logp_BT=_fit(ref, int(batch.attention_BT[rows].sum(-1).max())))
        return out.with_metrics(**{k: v for k, v in self.metrics.items() if k not in out.metrics})

    @classmethod
    def join(cls, parts: Sequence[tuple[Sequence[Group], Scores]]) -> Scores:
        """Records of different groups as one, their groups in order: turn scores and shaping terms, the
        reference's rows zero-padded to the widest. The verifier's and the shaping metrics are over all the
        groups; any other is the mean of the parts', weighted by their episodes."""
        groups = [g for gs, _ in parts for g in gs]
        out = Scores.of(groups)
        K = out.turns.scores_NGK.shape[-1]
        for name in parts[0][1].terms:  # every part ran the same scorers
            out = out.with_term(name, torch.cat([_fit(sc.terms[name], K) for _, sc in parts]))
        if parts[0][1].turns.group_NG is not None:  # every part ran the same scorers
            out = out.with_group_reward(
                torch.cat([sc.turns.group_NG for _, sc in parts if sc.turns.group_NG is not None])
            )
        refs = [sc.ref_logp_BT for _, sc in parts]
        if refs[0] is not None:
            T = max(r.shape[-1] for r in refs if r is not None)
            out = replace(out, ref_logp_BT=torch.cat([_fit(r, T) for r in refs if r is not None]))
        weight = [float(len(sc.task_ids)) for _, sc in parts]
        others = dict.fromkeys(k for _, sc in parts for k in sc.metrics if k not in out.metrics)
        mean = {k: sum(w * sc.metrics.get(k, 0.0) for w, (_, sc) in zip(weight, parts)) / sum(weight) for k in others}
        return out.with_metrics(**mean)


class Scorer(Protocol):
    def __call__(self, groups: list[Group], batch: TrainBatch, scores: Scores) -> Scores: ...


def score(groups: list[Group], batch: TrainBatch, scorers: Sequence[Scorer], start: Scores | None = None) -> Scores:
    """Run the scorers in order over the verifier's scores (or over `start`, what earlier scorers made)."""
    s = Scores.of(groups) if start is None else start
    for scorer in scorers:
        s = scorer(groups, batch, s)
    return s


def _fit(t: torch.Tensor, n: int) -> torch.Tensor:
    """`t` cut or zero-padded to length n in its last dimension."""
    if t.shape[-1] >= n:
        return t[..., :n]
    return torch.nn.functional.pad(t, (0, n - t.shape[-1]))


def per_turn(values_BT: torch.Tensor, batch: TrainBatch, shape_NGK: torch.Size) -> torch.Tensor:
    """Sum of per-token values over each (episode, turn)'s policy tokens, as an (N, G, K) tensor."""
    N, G, K = shape_NGK
    out = torch.zeros(N * G * K)
    assert batch.episode_B is not None
    m = batch.mask_BT > 0
    rows = batch.episode_B[:, None].expand_as(batch.turn_BT)
    idx = rows * K + batch.turn_BT.clamp(min=0)
    out.index_add_(0, idx[m], values_BT[m].float())
    return out.view(N, G, K)


@dataclass
class GroupRewards:
    """A task family's group-level reward (`TaskFamily.group_reward`), called once per group on its finished
    episodes."""

    reward: GroupReward

    def __call__(self, groups: list[Group], batch: TrainBatch, scores: Scores) -> Scores:
        values = [self.reward(g.episodes) for g in groups]
        for g, v in zip(groups, values):
            if len(v) != len(g.episodes):
                raise ValueError(f"a group reward gave {len(v)} values for a group of {len(g.episodes)} episodes")
        return scores.with_group_reward(torch.tensor(values, dtype=torch.float32))


@dataclass
class OverlongPenalty:
    """DAPO's soft overlong punishment, per answer: each turn's own length against the answer limit
    (`rollout.max_new_tokens`), 0 up to max - cache, then linear down to -1 at the limit."""

    max_new_tokens: int
    cache: int

    def __call__(self, groups: list[Group], batch: TrainBatch, scores: Scores) -> Scores:
        t = scores.turns
        return scores.with_term("overlong", overlong_penalty(t.tokens_NGK, self.max_new_tokens, self.cache))


@dataclass
class ReferenceLogprobs:
    """The reference policy's log-probs of the sampled tokens."""

    model: torch.nn.Module
    micro_batch_size: int
    temperature: float = 1.0
    pack: bool = False
    """Packed micro-batches, prompts shared (`loss.pack`)."""

    def __call__(self, groups: list[Group], batch: TrainBatch, scores: Scores) -> Scores:
        p = self.pack
        ref = batch_logprobs(self.model, batch, self.micro_batch_size, self.temperature, share_prefix=p, pack=p)
        return replace(scores, ref_logp_BT=ref)


@torch.no_grad()
def batch_values(critic: torch.nn.Module, batch: TrainBatch, micro_batch_size: int, pack: bool = False) -> torch.Tensor:
    """A value model's (B, T) values over the batch, in micro-batches, without gradient; `pack`: on packed
    micro-batches (`loss.pack`)."""
    out = torch.zeros_like(batch.mask_BT)
    was = critic.training
    critic.eval()
    device = next(critic.parameters()).device
    for i in range(0, batch.size, micro_batch_size):
        mb = on_device(batch.select(slice(i, i + micro_batch_size)), device)
        v = packed_values(critic, mb) if pack else critic(mb.input_ids_BT, mb.attention_BT)
        out[i : i + micro_batch_size, : v.shape[1]] = v.float().cpu()
    critic.train(was)
    return out * batch.mask_BT


@dataclass
class Values:
    """A value model's estimate at every sampled token (`Scores.extras["values"]`; 0 off the loss mask)."""

    critic: torch.nn.Module
    micro_batch_size: int
    pack: bool = False

    def __call__(self, groups: list[Group], batch: TrainBatch, scores: Scores) -> Scores:
        v = batch_values(self.critic, batch, self.micro_batch_size, self.pack)
        m = batch.mask_BT
        return scores.with_extra(values=v).with_metrics(value_mean=float(v.sum() / m.sum().clamp(min=1)))


@dataclass
class KLPenalty:
    """KL to the reference in the reward: each turn's summed k1 estimate times -beta (needs
    `ReferenceLogprobs` first)."""

    coef: float

    def __call__(self, groups: list[Group], batch: TrainBatch, scores: Scores) -> Scores:
        if scores.ref_logp_BT is None:
            raise ValueError("KLPenalty needs the reference log-probs: put ReferenceLogprobs before it")
        k1 = kl_estimate(batch.sample_logp_BT, scores.ref_logp_BT, "k1") * batch.mask_BT
        kl_NGK = per_turn(k1, batch, scores.turns.scores_NGK.shape)
        out = scores.with_term("kl", -self.coef * kl_NGK)
        return out.with_metrics(kl_ref_in_reward=float(kl_NGK.sum(-1).mean()))


@dataclass
class TeacherLogprobs:
    """One teacher's view of the student's own tokens, aligned with the batch (`Scores.teachers[name]`).

    `build` makes the teacher's prompt from the raw example (`raw[task.id]`, before the student's own
    prompt was applied), so the teacher may see privileged context the student never does.
    """

    name: str
    teacher: Teacher
    fmt: ChatFormat
    build: PromptBuilder | None = None
    raw: dict[str, Task] | None = None
    top_k: int = 0
    full: bool = False
    candidates: Callable[[Scores], torch.Tensor] | None = None
    """Ids to score at every position, from the scores so far (e.g. the student's own top-k)."""
    teacher_fmt: ChatFormat | None = None
    """The teacher's own format when its tokenizer differs from the student's (`teachers.align`)."""

    def __call__(self, groups: list[Group], batch: TrainBatch, scores: Scores) -> Scores:
        episodes = [e for g in groups for e in g.episodes]
        if batch.size != len(episodes):
            raise ValueError(
                "teachers score one row per episode; set rollout.drop_old_turns=false for multi-turn tasks"
            )
        cand = self.candidates(scores) if self.candidates is not None else None
        s = score_episodes(
            self.teacher,
            episodes,
            self.fmt,
            batch.input_ids_BT.shape[1],
            build=self.build,
            raw=self.raw,
            candidates_BTK=cand,
            top_k=self.top_k,
            full=self.full,
            teacher_fmt=self.teacher_fmt,
        )
        return replace(scores, teachers={**scores.teachers, self.name: s})


@dataclass
class RolloutCorrection:
    """The proximal policy's log-probs (the trainer's own, before the update) and the correction's weights
    against the behaviour policy's (the sampler's, `batch.sample_logp_BT`); `algos/correction.py`. In bypass
    mode the sampler's log-probs are the proximal ones: no forward."""

    model: torch.nn.Module
    mode: str
    cap: float | None
    micro_batch_size: int
    temperature: float = 1.0
    floor: float | None = None
    batch_norm: bool = False
    pack: bool = False
    """The proximal log-probs on packed micro-batches, as the update computes them (`loss.pack`)."""

    def __call__(self, groups: list[Group], batch: TrainBatch, scores: Scores) -> Scores:
        if bypasses(self.mode):
            prox = batch.sample_logp_BT
        else:
            p = self.pack
            prox = batch_logprobs(self.model, batch, self.micro_batch_size, self.temperature, share_prefix=p, pack=p)
        w, mask, stats = rollout_correction(
            prox, batch.sample_logp_BT, batch.mask_BT, self.mode, self.cap, self.floor, batch.episode_B, self.batch_norm
        )
        out = replace(scores, proximal_logp_BT=prox, correction_BT=w, correction_mask_BT=mask)
        return out.with_metrics(**{f"rollout/{k}": v for k, v in stats.items()})
