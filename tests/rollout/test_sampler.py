import copy
import math

import pytest
import torch
from transformers import LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from tempering.models.decode import FusedDecoder
from tempering.rollout.sampler import HFSampler, SamplingParams, _filter_logits


def _prompts(tok):
    return [tok.encode(p, add_special_tokens=False) for p in ["1+2=", "345+678=", "9="]]


def test_same_seed_same_samples(tiny):
    model, tok = tiny
    p = SamplingParams(max_new_tokens=6)
    a = HFSampler(model, tok, seed=5).sample(_prompts(tok), p)
    b = HFSampler(model, tok, seed=5).sample(_prompts(tok), p)
    c = HFSampler(model, tok, seed=6).sample(_prompts(tok), p)
    assert [s.ids for s in a] == [s.ids for s in b]
    assert [s.ids for s in a] != [s.ids for s in c]


def test_sampled_logprobs_are_the_models_logprobs(tiny):
    """Left padding must not change what each sequence sees: check against unpadded forwards."""
    model, tok = tiny
    prompts = _prompts(tok)
    out = HFSampler(model, tok, seed=1).sample(prompts, SamplingParams(max_new_tokens=5))
    for pr, s in zip(prompts, out):
        seq = torch.tensor([pr + s.ids])
        with torch.no_grad():
            lp = model(seq).logits[0].log_softmax(-1)
        want = [float(lp[len(pr) - 1 + i, t]) for i, t in enumerate(s.ids)]
        assert torch.allclose(torch.tensor(s.logprobs), torch.tensor(want), atol=1e-4)


def test_greedy_is_argmax_and_stops_on_eos(tiny):
    model, tok = tiny
    out = HFSampler(model, tok).sample(_prompts(tok)[:1], SamplingParams(max_new_tokens=4, temperature=0))
    seq = _prompts(tok)[0]
    for t in out[0].ids:
        with torch.no_grad():
            assert int(model(torch.tensor([seq])).logits[0, -1].argmax()) == t
        seq = seq + [t]
    assert out[0].truncated == (tok.eos_token_id not in out[0].ids)


def test_stop_strings_end_generation(tiny):
    model, tok = tiny
    full = HFSampler(model, tok, seed=2).sample(_prompts(tok), SamplingParams(max_new_tokens=12))
    text = tok.decode(full[0].ids[:3])
    stop = text[-1]
    out = HFSampler(model, tok, seed=2).sample(_prompts(tok), SamplingParams(max_new_tokens=12, stop=[stop]))
    assert tok.decode(out[0].ids).endswith(stop) and len(out[0].ids) <= 3 and not out[0].truncated


def test_top_k_and_top_p_filtering_by_hand():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    assert torch.isinf(_filter_logits(logits, 2, 1.0)[0, 2:]).all()
    kept = ~torch.isinf(_filter_logits(logits, 0, 0.75)[0])
    assert kept.tolist() == [True, True, False, False]  # 0.5 < 0.75, 0.5+0.3 >= 0.75 -> stop after the second


def _forward_logprobs(model, prompt, ids):
    with torch.no_grad():
        lp = model(torch.tensor([prompt + ids])).logits[0].log_softmax(-1)
    return [float(lp[len(prompt) - 1 + i, t]) for i, t in enumerate(ids)]


def test_shared_prompts_and_rows_that_finish_early_keep_each_rows_own_distribution(tiny):
    """Groups share one prefill and finished rows leave the batch: every row's log-probs still match an
    unpadded forward of that row alone."""
    model, tok = tiny
    prompts = [p for p in _prompts(tok) for _ in range(4)]  # 3 groups of 4
    s = HFSampler(model, tok, seed=3)
    s.eos_ids = list(range(20, 45))  # a quarter of the vocabulary ends a row: rows finish at many lengths
    out = s.sample(prompts, SamplingParams(max_new_tokens=12))
    lengths = {len(o.ids) for o in out}
    assert len(lengths) >= 4 and min(lengths) < 6  # some rows left the batch long before others
    for pr, o in zip(prompts, out):
        assert torch.allclose(torch.tensor(o.logprobs), torch.tensor(_forward_logprobs(model, pr, o.ids)), atol=1e-4)
        assert o.truncated == (o.ids[-1] not in s.eos_ids)


def test_greedy_rows_of_a_shared_batch_match_greedy_rows_alone(tiny):
    model, tok = copy.deepcopy(tiny[0]), tiny[1]
    torch.manual_seed(0)
    with torch.no_grad():  # a fresh tiny model says the same token everywhere: make its answers differ
        for w in model.parameters():
            w.add_(torch.randn_like(w) * 0.5)
    prompts = [p for p in _prompts(tok) for _ in range(2)]
    s = HFSampler(model, tok)
    s.eos_ids = [64, 13, 29]  # the 1st, 3rd and 4th greedy tokens of the three prompts
    p = SamplingParams(max_new_tokens=8, temperature=0)
    together = [o.ids for o in s.sample(prompts, p)]
    alone = [s.sample([pr], p)[0].ids for pr in prompts]
    assert together == alone and sorted({len(x) for x in together}) == [1, 3, 4]


def test_draw_follows_the_distribution_and_never_draws_a_zero_probability_token():
    from tempering.rollout.sampler import draw

    n = 200_000
    p = torch.tensor([0.5, 0.25, 0.0, 0.125, 0.125])
    logp = p.log().expand(n, 5).contiguous()  # log(0) = -inf: a filtered token
    x = draw(logp, torch.Generator().manual_seed(0))
    freq = torch.bincount(x, minlength=5).double() / n
    assert freq[2] == 0
    sigma = (p * (1 - p) / n).sqrt().double()
    assert ((freq - p.double()).abs() <= 5 * sigma + 1e-12).all(), freq


def test_whole_completions_are_drawn_with_the_models_probability(tiny):
    """Two-token completions under top-k 3 (9 possible): each one's frequency over many rows matches the
    product of the model's filtered softmax probabilities, from unpadded forwards."""
    model, tok = tiny
    prompt = tok.encode("12+3=", add_special_tokens=False)
    n = 6000
    s = HFSampler(model, tok, seed=11)
    s.eos_ids = []  # every row samples both tokens
    out = s.sample([prompt] * n, SamplingParams(max_new_tokens=2, top_k=3))
    seen: dict[tuple[int, ...], int] = {}
    for o in out:
        seen[tuple(o.ids)] = seen.get(tuple(o.ids), 0) + 1
    with torch.no_grad():
        first = _filter_logits(model(torch.tensor([prompt])).logits[0, -1], 3, 1.0).softmax(-1)
        want = {}
        for a in first.nonzero().flatten().tolist():
            nxt = _filter_logits(model(torch.tensor([prompt + [a]])).logits[0, -1], 3, 1.0).softmax(-1)
            for b in nxt.nonzero().flatten().tolist():
                want[a, b] = float(first[a] * nxt[b])
    assert set(seen) <= set(want) and abs(sum(want.values()) - 1) < 1e-5
    for c, q in want.items():
        assert abs(seen.get(c, 0) / n - q) <= 5 * (q * (1 - q) / n) ** 0.5 + 1e-3, (c, seen.get(c, 0) / n, q)


def test_the_models_own_forward_and_the_lean_one_sample_the_same_log_probs(tiny):
    """A Llama through its own forward (float32 sampling) and through the lean one (in float32 here), and a
    Qwen2 (grouped-query attention, biased projections): the log-probs of an unpadded forward."""
    model, tok = tiny
    prompts = [p for p in _prompts(tok) for _ in range(2)]
    own, lean = HFSampler(model, tok, seed=4), HFSampler(model, tok, seed=4)
    assert own.fused is None
    lean.fused = FusedDecoder.of(model)
    for s in (own, lean):
        out = s.sample(prompts, SamplingParams(max_new_tokens=5))
        for pr, o in zip(prompts, out):
            assert torch.allclose(
                torch.tensor(o.logprobs), torch.tensor(_forward_logprobs(model, pr, o.ids)), atol=1e-4
            )
    qwen = Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=len(tok),
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=64,
            pad_token_id=tok.pad_token_id,
        )
    ).eval()
    s = HFSampler(qwen, tok, seed=4)
    s.fused = FusedDecoder.of(qwen)
    assert s.fused is not None
    for pr, o in zip(prompts, s.sample(prompts, SamplingParams(max_new_tokens=5))):
        assert torch.allclose(torch.tensor(o.logprobs), torch.tensor(_forward_logprobs(qwen, pr, o.ids)), atol=1e-4)


def test_a_model_whose_forward_the_lean_one_does_not_reproduce_samples_through_its_own(tiny):
    class Capped(LlamaForCausalLM):
        def forward(self, *a, **kw):
            out = super().forward(*a, **kw)
            out.logits = 3.0 * torch.tanh(out.logits / 3.0)
            return out

    capped = Capped(tiny[0].config)
    capped.load_state_dict(tiny[0].state_dict())
    assert FusedDecoder.of(tiny[0]) is not None and FusedDecoder.of(capped.eval()) is None


@pytest.mark.skipif(not torch.ops.mkldnn._is_mkldnn_bf16_supported(), reason="a CPU without bf16 instructions")
def test_bf16_weights_draw_whole_completions_with_the_probability_they_record(tiny):
    """Sampling with bf16 weights: each two-token completion's frequency is the product of the two
    probabilities the sampler records, which are the float32 model's to bf16 rounding."""
    model, tok = tiny
    prompt = tok.encode("12+3=", add_special_tokens=False)
    n = 6000
    s = HFSampler(model, tok, seed=11, dtype=torch.bfloat16)
    assert s.fused is not None and s.fused.dtype == torch.bfloat16
    s.eos_ids = []
    out = s.sample([prompt] * n, SamplingParams(max_new_tokens=2, top_k=3))
    seen: dict[tuple[int, ...], list] = {}
    for o in out:
        seen.setdefault(tuple(o.ids), []).append(o.logprobs)
    for c, lps in seen.items():
        assert all(lp == lps[0] for lp in lps)  # one completion, one probability
        q = math.exp(sum(lps[0]))
        assert abs(len(lps) / n - q) <= 5 * (q * (1 - q) / n) ** 0.5 + 1e-3, (c, len(lps) / n, q)
    full = [o for o in HFSampler(model, tok, seed=11, dtype=torch.bfloat16).sample([prompt] * 8, SamplingParams(4))]
    for o in full:
        want = torch.tensor(_forward_logprobs(model, prompt, o.ids))
        assert torch.allclose(torch.tensor(o.logprobs), want, atol=0.1) and not torch.equal(
            torch.tensor(o.logprobs), want
        )
