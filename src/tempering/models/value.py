"""A value model (PPO's critic): V(prefix) at every token, a linear head on a causal LM's hidden states.

Two forms:
- a separate model (`ValueModel.separate`): the decoder of its own causal LM (usually a copy of the
  starting policy) plus the head, all trained by the value loss;
- a head on the policy (`ValueModel.on_policy`): the head alone reads the policy's last hidden states
  (computed without gradient: the value loss never moves the policy), cheap, no second model.
"""

from __future__ import annotations

import inspect
import math
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from transformers import PreTrainedModel


class ValueModel(nn.Module):
    """`forward(input_ids, attention_mask) -> (B, T)` values aligned with the policy's token log-probs:
    position t holds V of the prefix before token t (position 0 holds 0)."""

    def __init__(self, hidden_size: int, decoder: nn.Module | None = None, policy: nn.Module | None = None):
        super().__init__()
        if (decoder is None) == (policy is None):
            raise ValueError("a value model has either its own decoder or the policy's hidden states")
        self.decoder = decoder
        self._policy = (policy,)  # a tuple, so the policy is neither a submodule nor saved with the head
        self.head = nn.Linear(hidden_size, 1)
        nn.init.normal_(self.head.weight, std=1 / math.sqrt(hidden_size + 1))
        nn.init.zeros_(self.head.bias)

    @classmethod
    def separate(cls, causal_lm: PreTrainedModel) -> ValueModel:
        """A critic with its own weights: `causal_lm`'s decoder (its LM head is dropped) plus a value head."""
        causal_lm.requires_grad_(True).train()
        return cls(causal_lm.config.hidden_size, decoder=causal_lm.get_decoder())

    @classmethod
    def on_policy(cls, policy: PreTrainedModel) -> ValueModel:
        """A value head on the policy's last hidden states (only the head trains)."""
        return cls(policy.config.hidden_size, policy=policy)

    @property
    def config(self):
        """The configuration of the model whose hidden states the head reads."""
        return (self.decoder if self.decoder is not None else self._policy[0]).config

    def hidden(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        packed = {} if position_ids is None else {"position_ids": position_ids, "use_cache": False}
        if self.decoder is not None:
            return self.decoder(input_ids=input_ids, attention_mask=attention_mask, **packed).last_hidden_state
        policy = self._policy[0]
        assert policy is not None  # __init__ takes a policy when it has no decoder
        if packed and "logits_to_keep" in inspect.signature(policy.forward).parameters:
            packed["logits_to_keep"] = 1  # the hidden states only
        with torch.no_grad():
            out = policy(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True, **packed)
        return out.hidden_states[-1].detach()

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Padded rows: (B, T) values aligned with the tokens (position 0 holds 0). Packed rows (a 4D
        `attention_mask` and `position_ids`, `models.packing`): (R, L) values of the prefix up to and
        including each token."""
        h = self.hidden(input_ids, attention_mask, position_ids)
        if position_ids is not None:
            return self.head(h.to(self.head.weight.dtype)).squeeze(-1).float()
        h = h[:, :-1]
        v = self.head(h.to(self.head.weight.dtype)).squeeze(-1).float()
        return torch.cat([v.new_zeros((v.shape[0], 1)), v], dim=1)
