"""One forward over rows that share prompts: each distinct prompt is prefilled once.

A group's G samples (and a teacher scoring them) repeat one prompt G times. Here the distinct prompts
are left-padded and run once, only their last position goes through the LM head, and their key/value
cache is gathered to the rows before the rows' continuations run on top of it. Gradients, when
recorded, flow back through the gathered cache into the shared prompt computation.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

import torch
from transformers import DynamicCache


def forward_kwargs(model) -> tuple[str, dict]:
    """The keyword the causal LM takes its cache under (transformers renamed it), and the option that
    keeps only the last position's logits, where the model has it."""
    inner = getattr(model, "module", model)  # DDP
    inner = inner.get_base_model() if hasattr(inner, "get_base_model") else inner  # peft
    params = inspect.signature(inner.forward).parameters
    return ("cache" if "cache" in params else "past_key_values"), (
        {"logits_to_keep": 1} if "logits_to_keep" in params else {}
    )


def shared_prompt_forward(
    model,
    prompts: Sequence[Sequence[int]],
    row_prompt: torch.Tensor,
    cont_BS: torch.Tensor,
    cont_mask_BS: torch.Tensor,
    pad_id: int = 0,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Next-token logits after each row's prompt, (B, V), and after each of its continuation tokens,
    (B, S, V) (None when S = 0).

    `prompts` are the distinct (non-empty) prompts, `row_prompt` the prompt index of each row, `cont_BS`
    each row's tokens after its prompt, right-padded (`cont_mask_BS` = 0 on padding)."""
    dev = cont_BS.device
    cache_kw, keep_kw = forward_kwargs(model)
    P = max(len(p) for p in prompts)
    ids_UP = torch.full((len(prompts), P), pad_id, dtype=torch.long, device=dev)
    attn_UP = torch.zeros_like(ids_UP)
    for u, p in enumerate(prompts):  # left padding: every prompt ends at column P - 1
        ids_UP[u, P - len(p) :] = torch.tensor(p, dtype=torch.long, device=dev)
        attn_UP[u, P - len(p) :] = 1
    pos_UP = (attn_UP.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache()
    first_UV = model(
        input_ids=ids_UP, attention_mask=attn_UP, position_ids=pos_UP, use_cache=True, **{cache_kw: cache}, **keep_kw
    ).logits[:, -1]
    first_BV = first_UV[row_prompt]
    S = cont_BS.shape[1]
    if S == 0:
        return first_BV, None
    cache.batch_select_indices(row_prompt)
    attn = torch.cat([attn_UP[row_prompt], cont_mask_BS.long()], dim=1)
    pos = attn_UP.sum(-1)[row_prompt][:, None] + torch.arange(S, device=dev)[None, :]
    rest = model(input_ids=cont_BS, attention_mask=attn, position_ids=pos, use_cache=True, **{cache_kw: cache}).logits
    return first_BV, rest
