"""The cross-key rules of a training config, each written once.

The schemas' validators call them when the config is read, before any model loads (`LoopConfig` runs
`check`; a section runs its own); each raises ValueError naming both keys and the way out. One rule needs
what only the built method knows when its config does not decide it, the linearity of its loss: `assemble`
calls `linear_loss` again with the built loss (`refuse`: the same message as a `UserError`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from tempering.algos.correction import CORRECTIONS, MODES, reweights, steps
from tempering.config import ignored_unless
from tempering.errors import UserError


class RolloutKeys(Protocol):
    """The rollout section's keys the rules read (`train/config.py: RolloutSection`; typed by what they read,
    since config.py imports this module)."""

    @property
    def backend(self) -> str: ...
    @property
    def score_range(self) -> tuple[float, float] | None: ...
    @property
    def turn_context(self) -> str: ...
    @property
    def async_steps(self) -> int: ...
    @property
    def top_k(self) -> int: ...
    @property
    def top_p(self) -> float: ...
    @property
    def max_turns(self) -> int: ...


class LossKeys(Protocol):
    """The update section's keys the rules read (`UpdateSection`)."""

    @property
    def rollout_correction(self) -> str: ...
    @property
    def rollout_correction_cap(self) -> float | None: ...
    @property
    def rollout_correction_floor(self) -> float | None: ...
    @property
    def rollout_correction_batch_norm(self) -> bool: ...
    @property
    def autocast(self) -> str: ...


class RunKeys(Protocol):
    @property
    def eval_max_turns(self) -> int | None: ...


class ModelKeys(Protocol):
    @property
    def dtype(self) -> str: ...


class Config(Protocol):
    """A training config as the rules read it (`LoopConfig`)."""

    @property
    def model(self) -> ModelKeys: ...
    @property
    def rollout(self) -> RolloutKeys: ...
    @property
    def loss(self) -> LossKeys: ...
    @property
    def run(self) -> RunKeys: ...


class Linearity(NamedTuple):
    """Whether a method's loss is linear in its advantages, what decides it (`loss.policy_loss=dro`, `the rft
    loss`) and the way to a linear one (empty: none)."""

    linear: bool
    what: str
    instead: str = ""


def check(cfg: Config, linearity: Linearity | None) -> None:
    """The rules across sections of a training config (`LoopConfig`); `linearity`: its loss's, where the
    config alone decides it."""
    correction_sampling(cfg)
    if linearity is not None:
        linear_loss(cfg, linearity)
    async_correction(cfg)
    turn_context(cfg)
    autocast(cfg)


def rollout_keys(r: RolloutKeys) -> None:
    """The rollout section's keys that act only with another: a backend's options, the score clamp, the fork
    threshold of re-rendered turns, the sampling thread's cores."""
    ignored_unless(r, "rollout", ["vllm"], r.backend == "vllm", "rollout.backend=vllm")
    ignored_unless(r, "rollout", ["ray"], r.backend == "ray", "rollout.backend=ray")
    ignored_unless(r, "rollout", ["clamp_scores"], r.score_range is not None, "rollout.score_range")
    template = r.turn_context == "template"
    ignored_unless(r, "rollout", ["fork_threshold_tokens"], template, "rollout.turn_context=template")
    hf_async = r.async_steps > 0 and r.backend == "hf"
    ignored_unless(r, "rollout", ["async_threads"], hf_async, "rollout.async_steps > 0 with rollout.backend=hf")


def correction_keys(loss: LossKeys) -> None:
    """The rollout correction's bounds and batch normalisation only act with a correction, each mode's band
    is one it can use, and batch normalisation needs a mode that weights."""
    on = loss.rollout_correction != "none"
    for key in ("rollout_correction_cap", "rollout_correction_floor", "rollout_correction_batch_norm"):
        ignored_unless(loss, "loss", [key], on, "loss.rollout_correction=" + "|".join(MODES))
    bounds_of = steps(loss.rollout_correction, loss.rollout_correction_cap, loss.rollout_correction_floor)
    weighting = [m for m, _, _ in bounds_of if MODES[m].rule in ("truncate", "mask")]
    if loss.rollout_correction_batch_norm and not weighting:
        raise ValueError(
            f"loss.rollout_correction_batch_norm=true normalises weights, and loss.rollout_correction="
            f"{loss.rollout_correction} has none; use a weighting mode (tis, sequence_truncate, ...) or remove it"
        )


def correction_sampling(cfg: Config) -> None:
    """The sampler's log-probs come from the top-k / top-p filtered distribution and the trainer's from the
    whole one, so rho < 1 on every kept token even at staleness 0: the correction would be biased."""
    r = cfg.rollout
    off = [f"rollout.{k}={v}" for k, v, plain in (("top_k", r.top_k, 0), ("top_p", r.top_p, 1.0)) if v != plain]
    if off and cfg.loss.rollout_correction != "none":
        raise ValueError(
            f"loss.rollout_correction={cfg.loss.rollout_correction} with {', '.join(off)}: the sampler's log-probs "
            "are of the filtered distribution and the trainer's of the whole one, which biases the correction; "
            "set rollout.top_k=0 and rollout.top_p=1, or loss.rollout_correction=none"
        )


def linear_loss(cfg: Config, loss: Linearity) -> None:
    """Asynchronous rollouts and the rollout correction weight the advantages (rho = pi_proximal /
    pi_behaviour): a loss not linear in its advantages does not take those weights as weights of its terms."""
    if loss.linear:
        return
    for key, value, off, why in (
        (
            "rollout.async_steps",
            cfg.rollout.async_steps,
            0,
            "trains on older weights' samples, their advantages reweighted",
        ),
        ("loss.rollout_correction", cfg.loss.rollout_correction, "none", "reweights the advantages"),
    ):
        if value != off:
            way = f"{loss.instead}, or set {key}={off}" if loss.instead else f"set {key}={off}"
            raise ValueError(f"{key}={value} {why}, and {loss.what} is not linear in them; {way}")


def async_correction(cfg: Config) -> None:
    """Asynchronous rollouts train on samples of older weights, which only a correction that weights by
    pi_proximal / pi_behaviour accounts for (a rejection alone leaves them unweighted)."""
    k, mode = cfg.rollout.async_steps, cfg.loss.rollout_correction
    if k and (mode == "none" or not reweights(mode)):
        raise ValueError(
            f"rollout.async_steps={k} trains on samples of weights up to {k} update(s) old, and "
            f"loss.rollout_correction={mode} does not weight them by pi_proximal / pi_behaviour; set it to one that "
            f"does: {', '.join(m for m in CORRECTIONS if reweights(m))}"
        )


def turn_context(cfg: Config) -> None:
    """How a later turn's context is built matters only where an episode has later turns."""
    turns = max(cfg.rollout.max_turns, cfg.run.eval_max_turns or 1)
    ignored_unless(cfg.rollout, "rollout", ["turn_context"], turns > 1, "rollout.max_turns > 1")


def autocast(cfg: Config) -> None:
    """bf16 autocast changes nothing for weights that already compute in half precision."""
    if cfg.loss.autocast == "bf16" and cfg.model.dtype != "float32":
        raise ValueError(
            f"loss.autocast=bf16 has no effect with model.dtype={cfg.model.dtype} (the weights already compute "
            "in half precision); remove loss.autocast, or set model.dtype=float32 to keep float32 weights"
        )


def refuse(rule: Callable[..., None], *args: Any) -> None:
    """A rule run outside a validator (on a built method): its refusal as a `UserError`."""
    try:
        rule(*args)
    except ValueError as e:
        raise UserError(str(e)) from None
