"""Packed micro-batches give the padded forward's log-probs, entropies and gradients; models that cannot take
the packed layout are refused by class."""

import copy
import sys
from pathlib import Path

import pytest
import torch
from transformers import LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from tempering.errors import UserError
from tempering.models import packing, tiny_model
from tempering.models.packing import check_packing, pack
from tempering.train.batch import collate
from tempering.train.prefix import pack_batch, packed_logprobs, packed_vocab_logprobs
from tempering.train.update import token_logprobs, vocab_logprobs

sys.path.insert(0, str(Path(__file__).parents[1] / "train"))
from test_prefix import episodes


def grads_of(model, loss) -> dict[str, torch.Tensor]:
    model.zero_grad()
    loss().backward()
    return {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}


def qwen():
    """Grouped-query attention (2 key/value heads for 4 query heads) and a bias on q, k, v."""
    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=40,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        tie_word_embeddings=True,
    )
    return Qwen2ForCausalLM(cfg)


def eager():
    m = tiny_model("tiny-xs", seed=1)
    m.config._attn_implementation = "eager"
    return m


@pytest.mark.parametrize("make", [lambda: tiny_model("tiny-xs", seed=0), eager, qwen], ids=["sdpa", "eager", "gqa"])
@pytest.mark.parametrize("share", [True, False])
def test_packed_logprobs_entropy_and_gradients_match_the_padded_forward(make, share):
    model = make()
    batch = collate(episodes(), pad_id=0)
    m = batch.mask_BT
    want, want_ent = token_logprobs(model, batch, temperature=0.7, entropy=True)
    got, got_ent = packed_logprobs(model, batch, temperature=0.7, entropy=True, share_prefix=share)
    torch.testing.assert_close(got * m, want.detach() * m, atol=2e-6, rtol=1e-5)
    torch.testing.assert_close(got_ent * m, want_ent * m, atol=2e-6, rtol=1e-5)
    # every position from a row's first trained token on is predicted (feedback and later turns too)
    p, plen = pack_batch(batch, share)
    after = (torch.arange(batch.input_ids_BT.shape[1]) >= plen[:, None]) & batch.attention_BT.bool()
    torch.testing.assert_close(got[after], want.detach()[after], atol=2e-6, rtol=1e-5)
    assert (got[~after] == 0).all()

    weights = torch.randn(m.shape, generator=torch.Generator().manual_seed(2)) * m
    plain = grads_of(model, lambda: (token_logprobs(model, batch, 0.7)[0] * weights).sum())
    packed = grads_of(model, lambda: (packed_logprobs(model, batch, 0.7, share_prefix=share)[0] * weights).sum())
    assert max(float(g.abs().max()) for g in plain.values()) > 1e-3
    for k in plain:
        torch.testing.assert_close(packed[k], plain[k], atol=1e-5, rtol=1e-4)


def test_whole_distributions_on_packed_rows_match_the_padded_forward():
    model = tiny_model("tiny-xs", seed=0)
    batch = collate(episodes(), pad_id=0)
    m = batch.mask_BT[..., None]
    want = vocab_logprobs(model, batch, temperature=0.7)
    got = packed_vocab_logprobs(model, batch, temperature=0.7)
    torch.testing.assert_close(got * m, want.detach() * m, atol=2e-6, rtol=1e-5)
    weights = torch.randn(want.shape, generator=torch.Generator().manual_seed(1)) * m
    plain = grads_of(model, lambda: (vocab_logprobs(model, batch, 0.7) * weights).sum())
    packed = grads_of(model, lambda: (packed_vocab_logprobs(model, batch, 0.7) * weights).sum())
    for k in plain:
        torch.testing.assert_close(packed[k], plain[k], atol=1e-5, rtol=1e-4)


def test_the_output_layer_in_small_chunks_gives_the_same_values_and_gradients(monkeypatch):
    model = tiny_model("tiny-xs", seed=0)
    batch = collate(episodes(), pad_id=0)
    w = torch.randn(batch.mask_BT.shape, generator=torch.Generator().manual_seed(3)) * batch.mask_BT
    whole = grads_of(model, lambda: (packed_logprobs(model, batch, 0.7)[0] * w).sum())
    values = packed_logprobs(model, batch, 0.7, entropy=True)
    V = model.get_output_embeddings().out_features
    monkeypatch.setattr(packing, "MAX_LOGITS", 3 * V)  # three positions at a time
    chunked = grads_of(model, lambda: (packed_logprobs(model, batch, 0.7)[0] * w).sum())
    for a, b in zip(values, packed_logprobs(model, batch, 0.7, entropy=True)):
        torch.testing.assert_close(b, a.detach(), atol=1e-6, rtol=1e-6)
    for k in whole:
        torch.testing.assert_close(chunked[k], whole[k], atol=1e-6, rtol=1e-5)


def test_bf16_autocast_on_packed_rows_gives_the_padded_autocast_gradient_to_bf16_rounding():
    model = tiny_model("tiny-xs", seed=0)
    batch = collate(episodes(), pad_id=0)
    w = torch.randn(batch.mask_BT.shape, generator=torch.Generator().manual_seed(4)) * batch.mask_BT
    flat = lambda g: torch.cat([x.flatten() for x in g.values()])
    fp32 = flat(grads_of(model, lambda: (token_logprobs(model, batch)[0] * w).sum()))
    with torch.autocast("cpu", torch.bfloat16):
        padded = flat(grads_of(model, lambda: (token_logprobs(model, batch)[0] * w).sum()))
        packed = flat(grads_of(model, lambda: (packed_logprobs(model, batch)[0] * w).sum()))
    assert 0 < float((packed - fp32).norm() / fp32.norm()) < 0.05
    assert float((packed - padded).norm() / fp32.norm()) < 0.05


def test_a_continuation_sees_its_prefix_and_itself_and_rows_are_no_longer_than_the_longest_sequence():
    # one prefix shared by three continuations that do not fit one row together, and a sequence alone
    prefixes, owner = [[1, 2, 3], [9]], [0, 0, 0, 1]
    conts = [[4, 5], [6], [7, 8, 10], [11]]
    p = pack(prefixes, owner, conts)
    R, L = p.ids_RL.shape
    assert L == 6  # the longest sequence: 3 + 3
    assert sum(r.count(1) for r in p.ids_RL.tolist()) == 2  # the prefix again in the second row its group spans
    seen = p.mask(tiny_model("tiny-xs"))[:, 0]
    checked = 0
    for r in range(R):
        for q in range(L):
            b = int(p.seg_RL[r, q])
            if b < 0:
                continue
            j = int((p.seg_RL[r, :q] == b).sum())  # its index in its continuation
            visible = sorted(int(p.ids_RL[r, k]) for k in range(L) if seen[r, q, k])
            assert visible == sorted(prefixes[owner[b]] + conts[b][: j + 1])
            assert int(p.pos_RL[r, q]) == len(prefixes[owner[b]]) + j
            checked += 1
    assert checked == 7
    flat = p.ids_RL.flatten()
    for n in range(len(p.tok_N)):  # each token is predicted by the state of the token before it
        b, j = int(p.row_N[n]), int(p.col_N[n])
        assert int(p.tok_N[n]) == conts[b][j]
        assert int(flat[p.src_N[n]]) == (prefixes[owner[b]] + conts[b])[len(prefixes[owner[b]]) + j - 1]


def test_a_model_without_a_block_diagonal_mask_is_refused_by_class():
    model = tiny_model("tiny-xs", seed=0)
    model.config._attn_implementation = "flash_attention_2"
    with pytest.raises(UserError, match="LlamaForCausalLM.*flash_attention_2.*loss.pack=false"):
        check_packing(model)


def test_a_model_whose_logits_are_not_its_output_layers_is_refused_by_class():
    class Capped(LlamaForCausalLM):
        """Soft-capped logits, as Gemma 2's: the packed output layer would miss the cap."""

        def forward(self, *a, **kw):
            out = super().forward(*a, **kw)
            out.logits = 3.0 * torch.tanh(out.logits / 3.0)
            return out

    model = Capped(tiny_model("tiny-xs", seed=0).config)
    with pytest.raises(UserError, match="Capped.*other log-probs.*loss.pack=false"):
        check_packing(copy.deepcopy(model))
    check_packing(tiny_model("tiny-xs", seed=0))  # the plain model passes
