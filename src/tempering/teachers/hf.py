"""An in-process Hugging Face teacher (CPU or GPU).

Scoring is one batched pass per chunk of sequences: each distinct prompt is prefilled once (the G
samples of a group share it) and the continuations run on its gathered cache (`models.shared_prompt`),
or, with `pack`, the prompts and continuations run packed without padding (`models.packing`).
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

import torch

from tempering.errors import UserError
from tempering.models import gguf
from tempering.models.packing import attention_cost, check_packing, output_layer, pack, packed_states
from tempering.models.shared_prompt import shared_prompt_forward
from tempering.teachers.base import Teacher, TeacherScores, pad_right


class HFTeacher(Teacher):
    """Scores with a causal LM held in this process; gradients are never recorded."""

    supports_full = True

    def __init__(self, model, tokenizer, name: str = "teacher", max_logits: int = 1 << 26, pack: bool = False):
        self.model = model
        """Any causal LM; a model that is also being trained (the student scoring itself) works too."""
        self.tokenizer = tokenizer
        self.name = name
        self.max_logits = max_logits
        """Upper bound on logits elements (rows x positions x vocabulary) held at once; sets the chunk size."""
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.pack = pack
        """Score packed rows without padding (`loss.pack`)."""
        if pack:
            check_packing(model, f"teacher {name!r}")

    @classmethod
    def from_path(
        cls,
        path: str | Path,
        name: str | None = None,
        dtype: torch.dtype | str = torch.float32,
        device: str | torch.device = "cpu",
        pack: bool = False,
    ) -> HFTeacher:
        """Load a teacher from a model folder, or from a run folder holding `final/` (RL) or `model/` (pretrain)."""
        from tempering.models import load_policy

        model, tok = load_policy(str(resolve_model_dir(path)), dtype=dtype, device=device)
        return cls(model.eval().requires_grad_(False), tok, name=name or str(path), pack=pack)

    @property
    def vocab_size(self) -> int:
        return int(self.model.get_output_embeddings().weight.shape[0])

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def score(self, prompts, responses, candidates_BCK=None, top_k=0, full=False) -> TeacherScores:
        if len(prompts) != len(responses):
            raise ValueError("one prompt per response")
        if top_k > self.vocab_size:
            raise UserError(
                f"top_k={top_k} is larger than the vocabulary of {self.name} ({self.vocab_size} tokens); use a smaller k"
            )
        C = max((len(r) for r in responses), default=0)
        rows = max(1, self.max_logits // max(1, (C + 1) * self.vocab_size))
        was_training = self.model.training
        self.model.eval()
        try:
            parts = [
                self._score_chunk(
                    prompts[i : i + rows],
                    responses[i : i + rows],
                    None if candidates_BCK is None else candidates_BCK[i : i + rows],
                    top_k,
                    full,
                    C,
                )
                for i in range(0, len(prompts), rows)
            ]
        finally:
            self.model.train(was_training)
        if not parts:
            return TeacherScores(torch.zeros(0, 0), torch.zeros(0, 0))
        # the two required fields are tensors in every part, so they stay tensors
        joined: dict[str, Any] = {
            f.name: None if getattr(parts[0], f.name) is None else torch.cat([getattr(p, f.name) for p in parts])
            for f in fields(TeacherScores)
        }
        return TeacherScores(**joined)

    @torch.inference_mode()
    def _score_chunk(self, prompts, responses, cand_BCK, top_k, full, C) -> TeacherScores:
        dev = self.device
        resp_BC, mask_BC = pad_right(responses, self.pad_id)
        if resp_BC.shape[1] < C:  # every chunk is padded to the same width
            resp_BC = torch.nn.functional.pad(resp_BC, (0, C - resp_BC.shape[1]), value=self.pad_id)
            mask_BC = torch.nn.functional.pad(mask_BC, (0, C - mask_BC.shape[1]))
        resp = resp_BC.to(dev)
        V = self.vocab_size
        if cand_BCK is not None and (int(cand_BCK.max()) >= V or int(cand_BCK.min()) < 0):
            raise UserError(f"candidate token ids fall outside the vocabulary of {self.name} ({V} tokens)")
        cand = None if cand_BCK is None else cand_BCK.to(dev)
        if self.pack:
            got = self._packed(prompts, responses, cand, top_k, full, C)
        else:
            got = self._padded(prompts, resp, mask_BC.to(dev), cand, top_k, full)
        out = TeacherScores(token_logp_BC=got["token"] * mask_BC, mask_BC=mask_BC)
        if cand is not None:
            out.cand_logp_BCK, out.cand_found_BCK = got["cand"], torch.ones_like(got["cand"])
        if top_k > 0:
            out.top_ids_BCK, out.top_logp_BCK = got["top_ids"], got["top"]
        if full:
            out.full_logp_BCV = got["full"]
        return out

    def _padded(self, prompts, resp, mask_BC, cand, top_k, full) -> dict[str, torch.Tensor]:
        # position 0 (from the prompt) and positions 1.. (from the continuation) are scored apart, so that
        # no (B, C, V) tensor beyond the model's own logits is ever built unless `full` asks for it
        first_BV, rest_BCV = self._logits(prompts, resp, mask_BC)
        parts = [_read(first_BV[:, None], resp[:, :1], None if cand is None else cand[:, :1], top_k, full)]
        if rest_BCV is not None:
            parts.append(_read(rest_BCV, resp[:, 1:], None if cand is None else cand[:, 1:], top_k, full))
        return {k: torch.cat([p[k] for p in parts], dim=1).cpu() for k in parts[0]}

    def _packed(self, prompts, responses, cand, top_k, full, C) -> dict[str, torch.Tensor]:
        """The same reads from one forward of the packed prompts and responses: the output layer only on
        the positions that predict a response token; zeros elsewhere."""
        responses = [list(r) for r in responses]
        p = pack(*self._distinct(prompts), responses, self.device, self.pad_id, attention_cost(self.model))
        logits = output_layer(self.model)(packed_states(self.model, p))
        cand_N = None if cand is None else cand[p.row_N, p.col_N][:, None]
        got = _read(logits[:, None], p.tok_N[:, None], cand_N, top_k, full)
        at = (p.row_N, p.col_N)
        return {k: v.new_zeros((len(prompts), C, *v.shape[2:])).index_put(at, v[:, 0]).cpu() for k, v in got.items()}

    def _logits(
        self, prompts: list[list[int]], resp_BC: torch.Tensor, mask_BC: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Next-token logits of continuation position 0, (B, V), and of positions 1.., (B, C-1, V).

        Position 0 comes from the last prompt token (prefilled once per distinct prompt); positions
        1.. from a forward of the continuation's first C-1 tokens on top of the repeated prompt cache.
        """
        uniq, row_prompt = self._distinct(prompts)
        C = resp_BC.shape[1]
        idx = torch.tensor(row_prompt, device=self.device)
        return shared_prompt_forward(self.model, uniq, idx, resp_BC[:, : C - 1], mask_BC[:, : C - 1], self.pad_id)

    def _distinct(self, prompts: list[list[int]]) -> tuple[list[list[int]], list[int]]:
        """The distinct prompts and the index of each row's."""
        uniq: dict[tuple[int, ...], int] = {}
        owner = [uniq.setdefault(tuple(p), len(uniq)) for p in prompts]
        if () in uniq:
            raise UserError(f"{self.name}: cannot score a continuation after an empty prompt")
        return [list(u) for u in uniq], owner


def _read(
    logits_BCV: torch.Tensor, tok_BC: torch.Tensor, cand_BCK: torch.Tensor | None, top_k: int, full: bool
) -> dict[str, torch.Tensor]:
    """Log-probs read off logits: of the given tokens, of candidates, the top-k and (if asked) all of them."""
    logits = logits_BCV.float()
    lse = logits.logsumexp(-1, keepdim=True)
    out = {"token": (logits.gather(-1, tok_BC[..., None]) - lse).squeeze(-1)}
    if cand_BCK is not None:
        out["cand"] = logits.gather(-1, cand_BCK) - lse
    if top_k > 0:
        top = logits.topk(top_k, dim=-1)
        out["top_ids"], out["top"] = top.indices, top.values - lse
    if full:
        out["full"] = logits - lse
    return out


def resolve_model_dir(path: str | Path) -> Path:
    """A Hugging Face model folder: `path` itself, or the `final/` or `model/` folder a run wrote into it."""
    p = Path(gguf.resolve(str(path))).expanduser()
    for cand in (p, p / "final", p / "model"):
        if (cand / "config.json").is_file():
            return cand
    if not p.exists():
        raise UserError(
            f"teacher checkpoint {str(path)!r} does not exist; give a model folder or the folder of a finished run"
        )
    raise UserError(
        f"{str(path)!r} holds no model: looked for config.json in it, in final/ (a train run) and in model/ "
        "(a pretrain run); give a Hugging Face model folder or a finished run's folder"
    )
