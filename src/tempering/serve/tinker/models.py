"""The models behind the API: base models (loaded once, for sampling them), training models (a base loaded anew,
with LoRA adapters or every weight trainable), their forward/backward on Tinker's data, Adam steps,
sampler snapshots and checkpoints on disk.

A training model's gradients accumulate over `forward_backward` calls until `optim_step`, as Tinker's do.
Every forward runs in eval mode (no dropout), so the trainer's log-probs are the sampler's up to float
rounding. A checkpoint is a folder: `meta.json` (what model, what adapters), `weights.safetensors` (the
trainable weights) and, for training states, `optimizer.pt`.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import tempfile
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from tinker.types.topk_logprobs import MASK_LOGPROB

from tempering.models.gguf import PACKAGED
from tempering.models.io import load_policy, model_folder, resolve_device
from tempering.models.lora import add_lora
from tempering.models.tiny import TINY_SIZES
from tempering.rollout.sampler import HFSampler, SamplingParams, sampling_logprobs
from tempering.serve.tinker import losses
from tempering.serve.tinker.wire import BadRequest, Datum, Sampled, Targets

ATTN = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")
UNEMBED = ("lm_head",)


@dataclass(frozen=True)
class LoraSpec:
    rank: int
    alpha: float
    targets: tuple[str, ...]
    seed: int

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "alpha": self.alpha, "targets": list(self.targets), "seed": self.seed}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> LoraSpec:
        return cls(int(d["rank"]), float(d["alpha"]), tuple(d["targets"]), int(d["seed"]))


def lora_targets(attn: bool, mlp: bool, unembed: bool) -> tuple[str, ...]:
    return (ATTN if attn else ()) + (MLP if mlp else ()) + (UNEMBED if unembed else ())


class Bases:
    """Base models by their tempering name, each loaded once, frozen, for sampling them."""

    def __init__(self, device: str, dtype: str, seed: int):
        self.device, self.dtype, self.seed = resolve_device(device), dtype, seed
        self._loaded: dict[str, tuple[torch.nn.Module, Any]] = {}

    def get(self, name: str) -> tuple[torch.nn.Module, Any]:
        if name not in self._loaded:
            model, tok = load_policy(name, seed=self.seed, dtype=self.dtype, device=self.device)
            model.eval().requires_grad_(False)
            self._loaded[name] = (model, tok)
        return self._loaded[name]


def servable(name: str) -> bool:
    """A tempering model name: a tiny size, a packaged model or a local Hugging Face folder."""
    return name in TINY_SIZES or name in PACKAGED or (Path(name).expanduser() / "config.json").is_file()


def model_name(name: str) -> str:
    """The stored form of a tempering model: a folder by its absolute path (a checkpoint must not depend
    on the working directory), other names as they are."""
    return name if name in TINY_SIZES or name in PACKAGED else str(model_folder(name))


def vocab_size(module: torch.nn.Module) -> int:
    return int(module.get_input_embeddings().num_embeddings)  # type: ignore[operator]


def context_length(module: torch.nn.Module) -> int:
    return int(getattr(module.config, "max_position_embeddings", 0) or 1 << 30)


@dataclass
class Snapshot:
    version: int
    weights: dict[str, torch.Tensor]


@dataclass
class TrainingModel:
    model_id: str
    base_model: str
    """The name the client asked for."""
    model: str
    """The tempering model it runs (`model_name`)."""
    lora: LoraSpec | None
    module: torch.nn.Module
    tokenizer: Any
    optimizer: torch.optim.AdamW | None = None
    version: int = 0
    """Optimizer steps (and loads) so far: a snapshot of another version samples from a copy."""
    snapshots: OrderedDict[str, Snapshot] = field(default_factory=OrderedDict)
    _shadow: torch.nn.Module | None = None
    """A copy that holds an older snapshot's weights, and which snapshot (session id, version)."""
    _shadow_holds: tuple[str, int] | None = None

    @property
    def vocab(self) -> int:
        return vocab_size(self.module)

    def trainable(self) -> dict[str, torch.nn.Parameter]:
        return {n: p for n, p in self.module.named_parameters() if p.requires_grad}

    def weights(self) -> dict[str, torch.Tensor]:
        return {n: p.detach().to("cpu", copy=True) for n, p in self.trainable().items()}

    def load_weights(self, weights: dict[str, torch.Tensor], module: torch.nn.Module | None = None) -> None:
        params = dict((module or self.module).named_parameters())
        missing = sorted(set(self.trainable()) - set(weights))
        unexpected = sorted(set(weights) - set(params))
        if missing or unexpected:
            raise BadRequest(
                f"the checkpoint does not fit model {self.model_id} (missing {missing[:3]}, unexpected {unexpected[:3]}); "
                "load it into a model of the same base and LoRA settings"
            )
        with torch.no_grad():
            for n, w in weights.items():
                params[n].copy_(w)

    # -- training ------------------------------------------------------------------------------------

    def forward_backward(
        self, name: str, config: dict[str, float | str], data: list[Datum], forward_only: bool, token_budget: int
    ) -> tuple[list[dict[str, np.ndarray]], dict[str, float]]:
        """Per-datum `logprobs` and the summed loss; gradients accumulate unless `forward_only`."""
        s = losses.settings(name, config)
        device = next(self.module.parameters()).device
        outputs: list[dict[str, np.ndarray]] = []
        total = 0.0
        diffs: list[float] = []
        for rows in _micro_batches(data, token_budget):
            with torch.no_grad() if forward_only else torch.enable_grad():
                logp, inputs, valid = _batch_logprobs(self.module, rows, device)
                term = losses.per_token(name, s, logp, inputs, valid)
                while valid.dim() < term.dim():
                    valid = valid[..., None]
                loss = (term * valid).sum()
            if not forward_only:
                loss.backward()
            total += float(loss.detach())
            for b, d in enumerate(rows):
                lp = logp[b, : len(d.tokens)].detach().float().cpu().numpy()
                outputs.append({"logprobs": lp})
                if "logprobs" in d.inputs and "advantages" in d.inputs:  # how far the sampler's log-probs are
                    sampled = d.inputs["advantages"] != 0
                    if sampled.any():
                        diffs.append(float(np.abs(lp[sampled] - d.inputs["logprobs"][sampled]).max()))
        metrics = {"loss:sum": total}
        if diffs:
            metrics["sampler_logprob_diff:max"] = max(diffs)
        return outputs, metrics

    def optim_step(
        self, lr: float, beta1: float, beta2: float, eps: float, weight_decay: float, clip: float
    ) -> dict[str, float]:
        params = list(self.trainable().values())
        if self.optimizer is None:
            self.optimizer = torch.optim.AdamW(params, lr=lr, betas=(beta1, beta2), eps=eps, weight_decay=weight_decay)
        for g in self.optimizer.param_groups:
            g.update(lr=lr, betas=(beta1, beta2), eps=eps, weight_decay=weight_decay)
        grads = [p.grad for p in params if p.grad is not None]
        norm = (
            float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))) if grads else 0.0
        )
        if clip > 0 and grads:
            torch.nn.utils.clip_grad_norm_(params, clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.version += 1
        return {"grad_norm": norm}

    # -- sampling ------------------------------------------------------------------------------------

    def snapshot(self, session_id: str, keep: int) -> None:
        self.snapshots[session_id] = Snapshot(self.version, self.weights())
        while len(self.snapshots) > keep:
            self.snapshots.popitem(last=False)

    def sampler_module(self, session_id: str) -> torch.nn.Module:
        """The module holding a snapshot's weights: the model itself while it has not stepped since,
        else a copy into which the snapshot is loaded."""
        snap = self.snapshots.get(session_id)
        if snap is None:
            raise BadRequest(
                f"sampling session {session_id} of model {self.model_id} is no longer kept (the service keeps the "
                "newest max_snapshots unnamed snapshots per model); save it with a name to keep it",
                status=404,
            )
        if snap.version == self.version:
            return self.module
        if self._shadow is None:
            self._shadow = copy.deepcopy(self.module).requires_grad_(False)
        if self._shadow_holds != (session_id, snap.version):
            self.load_weights(snap.weights, self._shadow)
            self._shadow_holds = (session_id, snap.version)
        return self._shadow

    # -- checkpoints ---------------------------------------------------------------------------------

    def meta(self) -> dict[str, Any]:
        return {
            "model_id": self.model_id,
            "base_model": self.base_model,
            "model": self.model,
            "lora": self.lora.to_json() if self.lora else None,
            "version": self.version,
        }

    def save(self, folder: Path, optimizer: bool, weights: dict[str, torch.Tensor] | None = None) -> None:
        """Write a checkpoint folder atomically (`weights`: a snapshot's, else the current ones)."""
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
        try:
            save_file(
                {k: v.contiguous() for k, v in (weights or self.weights()).items()}, str(tmp / "weights.safetensors")
            )
            if optimizer and self.optimizer is not None:
                torch.save(self.optimizer.state_dict(), tmp / "optimizer.pt")
            (tmp / "meta.json").write_text(json.dumps(self.meta(), indent=1))
            if folder.exists():
                shutil.rmtree(folder)
            os.replace(tmp, folder)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def restore(self, folder: Path, optimizer: bool) -> None:
        self.load_weights(load_file(str(folder / "weights.safetensors")))
        self.optimizer = None
        if optimizer:
            state = folder / "optimizer.pt"
            if not state.is_file():
                raise BadRequest(
                    f"{folder.name} holds no optimizer state (a sampler checkpoint, or saved before any step)"
                )
            self.optimizer = torch.optim.AdamW(list(self.trainable().values()))
            self.optimizer.load_state_dict(torch.load(state, map_location=next(self.module.parameters()).device))
        self.version += 1


def build(bases: Bases, model_id: str, base_model: str, model: str, lora: LoraSpec | None) -> TrainingModel:
    """A training model: the base loaded anew, with fresh LoRA adapters (B = 0, seeded) or all weights trainable."""
    module, tok = load_policy(model, seed=bases.seed, dtype=bases.dtype, device=bases.device)
    if lora is None:
        module.requires_grad_(True)
    else:
        present = {n.rsplit(".", 1)[-1] for n, m in module.named_modules() if isinstance(m, torch.nn.Linear)}
        targets = [t for t in lora.targets if t in present]
        if not targets:
            raise BadRequest(f"no LoRA target ({', '.join(lora.targets)}) is a linear layer of {base_model}")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(lora.seed)
            module = add_lora(module, rank=lora.rank, alpha=lora.alpha, target_modules=targets)
    module.eval()
    return TrainingModel(model_id, base_model, model, lora, module, tok)


def from_checkpoint(bases: Bases, model_id: str, folder: Path, base_model: str | None) -> TrainingModel:
    meta = read_meta(folder)
    lora = LoraSpec.from_json(meta["lora"]) if meta["lora"] else None
    tm = build(bases, model_id, base_model or meta["base_model"], meta["model"], lora)
    tm.load_weights(load_file(str(folder / "weights.safetensors")))
    return tm


def read_meta(folder: Path) -> dict[str, Any]:
    try:
        return json.loads((folder / "meta.json").read_text())
    except (OSError, ValueError) as e:
        raise BadRequest(f"checkpoint {folder} is unreadable ({e})") from None


# -- forward ----------------------------------------------------------------------------------------


def _micro_batches(data: list[Datum], budget: int):
    """Consecutive rows whose padded size (rows x longest) stays within `budget` tokens (at least one row)."""
    rows: list[Datum] = []
    longest = 0
    for d in data:
        n = len(d.tokens)
        if rows and max(longest, n) * (len(rows) + 1) > budget:
            yield rows
            rows, longest = [], 0
        rows.append(d)
        longest = max(longest, n)
    if rows:
        yield rows


def _batch_logprobs(module: torch.nn.Module, rows: list[Datum], device: torch.device):
    """log p(target | prefix) at every position of right-padded rows, the inputs padded alike, and the
    mask of real positions; a (N, K) target gives (B, T, K)."""
    T = max(len(d.tokens) for d in rows)
    ids = torch.zeros((len(rows), T), dtype=torch.long)
    attn = torch.zeros((len(rows), T), dtype=torch.long)
    for b, d in enumerate(rows):
        ids[b, : len(d.tokens)] = torch.from_numpy(d.tokens)
        attn[b, : len(d.tokens)] = 1
    inputs: dict[str, torch.Tensor] = {}
    for key in rows[0].inputs:
        tail = rows[0].inputs[key].shape[1:]
        dtype = torch.long if key == "target_tokens" else torch.float32
        t = torch.zeros((len(rows), T, *tail), dtype=dtype)
        for b, d in enumerate(rows):
            t[b, : len(d.tokens)] = torch.from_numpy(
                np.asarray(d.inputs[key]).astype(np.int64 if key == "target_tokens" else np.float32)
            )
        inputs[key] = t.to(device)
    logits = module(input_ids=ids.to(device), attention_mask=attn.to(device)).logits.float()
    targets = inputs["target_tokens"]
    flat = targets if targets.dim() == 3 else targets[..., None]
    logp = logits.gather(-1, flat) - torch.logsumexp(logits, -1, keepdim=True)
    return (logp if targets.dim() == 3 else logp.squeeze(-1)), inputs, attn.to(device).float()


@dataclass
class PromptScores:
    """What a sampling request asks of its prompt, from one forward pass over it (`score_prompt`)."""

    logprobs: np.ndarray
    """log p(token | prefix) of each prompt token, (len(prompt),), NaN at position 0 and before the last `last_n`."""
    topk: tuple[np.ndarray, np.ndarray] | None = None
    """The `topk` likeliest tokens at each position and their log-probs, (len(prompt), topk) each."""
    targets: np.ndarray | None = None
    """The log-prob of each `Targets` cell's id at its position, (cells,) (0.0 where it asks none)."""
    alt: tuple[np.ndarray, np.ndarray] | None = None
    """`alt_k` draws at each position after the first and the model's log-probs of them, (len(prompt) - 1, alt_k)."""


@torch.no_grad()
def score_prompt(
    module: torch.nn.Module,
    tokens: list[int],
    last_n: int | None,
    topk: int = 0,
    targets: Targets | None = None,
    alt_k: int = 0,
    temperature: float = 1.0,
    seed: int = 0,
) -> PromptScores:
    """The prompt's log-probs and, from the same forward pass, the SDK's `topk_prompt_logprobs` (empty cells, none
    computed there, hold the SDK's sentinel: token 0, log-prob MASK_LOGPROB), `target_prompt_logprobs` and
    `prompt_alt_tokens_k`. The alternatives are drawn independently, with replacement, from softmax(logits /
    `temperature`) (the most likely token when it is 0), on a random stream of their own derived from `seed`
    (the sampler's tokens use `seed` itself); their log-probs are the model's own (temperature 1), as
    `prompt_logprobs` and `target_prompt_logprobs` are. `last_n` limits the first two only."""
    device = next(module.parameters()).device
    ids = torch.tensor([tokens], device=device)
    logits = module(input_ids=ids).logits[0, :-1].float()
    logp = logits - torch.logsumexp(logits, -1, keepdim=True)
    out = PromptScores(np.full(len(tokens), np.nan, dtype=np.float32))
    out.logprobs[1:] = logp.gather(-1, ids[0, 1:, None]).squeeze(-1).cpu().numpy()
    skip = 1 if last_n is None else len(tokens) - last_n
    out.logprobs[:skip] = np.nan
    if topk:
        top_ids, top_lp = _topk(logp, topk, 1)
        top_ids[:skip], top_lp[:skip] = 0, MASK_LOGPROB
        out.topk = (top_ids, top_lp)
    if targets is not None:
        rows = torch.from_numpy(targets.rows).to(device)
        asked = torch.from_numpy(targets.ids).clamp(min=0).to(device)
        out.targets = logp[rows, asked].cpu().numpy()
    if alt_k:
        if temperature > 0:
            stream = int(np.random.SeedSequence([seed % 2**64, 1]).generate_state(1, np.uint64)[0] >> 1)
            generator = torch.Generator(device).manual_seed(stream)
            probs = (logits / temperature).softmax(-1)
            drawn = torch.multinomial(probs, alt_k, replacement=True, generator=generator)
        else:
            drawn = logits.argmax(-1, keepdim=True).expand(-1, alt_k)
        out.alt = (drawn.cpu().numpy(), logp.gather(-1, drawn).cpu().numpy())
    return out


def _topk(logp: torch.Tensor, k: int, skip: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The `k` likeliest tokens at each row of `logp` (T, V) and their log-probs, (skip + T, k) each, in falling
    order; a cell with none (the first `skip` rows, beyond the vocabulary, -inf) holds the SDK's sentinel: token
    0, log-prob MASK_LOGPROB."""
    values, index = logp.topk(min(k, logp.shape[-1]), -1)
    top_ids = np.zeros((skip + len(logp), k), dtype=np.int32)
    top_lp = np.full((skip + len(logp), k), MASK_LOGPROB, dtype=np.float32)
    real = torch.isfinite(values).cpu().numpy()
    top_ids[skip:, : index.shape[1]] = np.where(real, index.cpu().numpy(), 0)
    top_lp[skip:, : values.shape[1]] = np.where(real, values.cpu().numpy(), MASK_LOGPROB)
    return top_ids, top_lp


@torch.no_grad()
def sampled_topk(
    module: torch.nn.Module, prompt: list[int], sequences: list[Sampled], k: int, params: SamplingParams
) -> list[tuple[np.ndarray, np.ndarray]]:
    """For each sequence sampled from `prompt`, the `k` likeliest tokens at each sampled position and their
    log-probs, (len(tokens), k) each, from the distribution its tokens' log-probs are of (`params`' temperature,
    top-k and top-p: tokens outside them get the sentinel), by one forward pass over prompt and sample."""
    device = next(module.parameters()).device
    out = []
    for s in sequences:
        ids = torch.tensor([prompt + s.tokens], device=device)
        logits = module(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
        out.append(_topk(sampling_logprobs(logits, params), k))
    return out


def sample(
    module: torch.nn.Module, tokenizer: Any, prompts: list[list[int]], params: SamplingParams, seed: int, add_eos: bool
) -> list[Sampled]:
    """One batch through tempering's sampler (a group's prompt is prefilled once); `add_eos`: the model's
    end-of-sequence tokens stop it besides `params.stop_ids`."""
    sampler = HFSampler(module, tokenizer, seed=seed)
    if add_eos:
        params = replace(params, stop_ids=[*(params.stop_ids or []), *sampler.eos_ids])
    out = sampler.sample(prompts, params)
    return [Sampled(s.ids, s.logprobs, not s.truncated) for s in out]


def check_ids(tokens: list[int], vocab: int, where: str) -> None:
    bad = [t for t in tokens if not 0 <= t < vocab]
    if bad:
        raise BadRequest(f"{where}: token id {bad[0]} is outside the vocabulary [0, {vocab})")
