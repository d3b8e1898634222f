import torch

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
