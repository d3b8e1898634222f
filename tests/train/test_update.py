import copy

import pytest
import torch

from tempering.algos.losses import AGG_MODES, LossNorm
from tempering.train.batch import broadcast_turn_adv, collate
from tempering.train.update import UpdateSettings, policy_update, ppo_loss, token_logprobs
from tempering.types import Episode, Task, Turn


def _episodes():
    g = torch.Generator().manual_seed(0)
    eps = []
    for i in range(8):
        p = torch.randint(4, 60, (3 + i % 3,), generator=g).tolist()
        turns = [Turn(torch.randint(4, 60, (2 + (i * 7) % 5,), generator=g).tolist(), [-2.0] * (2 + (i * 7) % 5))]
        if i % 2:
            turns[0].feedback_ids = [10, 11]
            turns.append(Turn([12, 13, 14], [-1.5] * 3))
        eps.append(Episode(Task(str(i), ""), p, turns))
    return eps


def _grads(model, batch, settings):
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    policy_update(model, opt, None, batch, settings)
    return [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("agg", AGG_MODES)
def test_accumulating_four_micro_batches_gives_the_big_batch_gradient(tiny, agg):
    model, _ = tiny
    batch = collate(_episodes(), pad_id=0)
    batch.adv_BT = torch.linspace(-1, 1, batch.size)[:, None] * batch.mask_BT
    s_big = UpdateSettings(micro_batch_size=8, loss_agg=agg, max_grad_norm=1e9, max_response_len=12)
    s_small = UpdateSettings(micro_batch_size=2, loss_agg=agg, max_grad_norm=1e9, max_response_len=12)
    g_big = _grads(copy.deepcopy(model), batch, s_big)
    g_small = _grads(copy.deepcopy(model), batch, s_small)
    assert any(float(g.abs().sum()) > 0 for g in g_big)
    for a, b in zip(g_big, g_small):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)


def test_feedback_and_prompt_tokens_are_masked():
    eps = _episodes()
    b = collate(eps, pad_id=0)
    e = eps[1]
    n_prompt = len(e.prompt_ids)
    assert b.mask_BT[1, :n_prompt].sum() == 0
    first = len(e.turns[0].action_ids)
    assert b.mask_BT[1, n_prompt : n_prompt + first].tolist() == [1.0] * first
    assert b.mask_BT[1, n_prompt + first : n_prompt + first + 2].tolist() == [0.0, 0.0]  # feedback
    assert b.turn_BT[1, n_prompt + first + 2 :].tolist()[:3] == [1, 1, 1]
    adv = broadcast_turn_adv(torch.tensor([[2.0, -3.0]] * 8), b)
    assert adv[1, n_prompt] == 2.0 and adv[1, n_prompt + first + 2] == -3.0 and adv[1, 0] == 0.0


def test_token_logprobs_match_a_manual_forward(tiny):
    model, _ = tiny
    b = collate(_episodes()[:2], pad_id=0)
    logp, _ = token_logprobs(model, b)
    with torch.no_grad():
        ids = b.input_ids_BT[0, : int(b.attention_BT[0].sum())]
        logits = model(input_ids=ids[None]).logits[0].log_softmax(-1)
    assert torch.allclose(logp[0, 3], logits[2, ids[3]], atol=1e-5)


def test_on_policy_update_changes_the_policy_toward_positive_advantage(tiny):
    model = copy.deepcopy(tiny[0])
    eps = _episodes()
    b = collate(eps, pad_id=0)
    b.adv_BT = b.mask_BT.clone()  # reinforce every sampled token
    before, _ = token_logprobs(model, b)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    stats = policy_update(model, opt, None, b, UpdateSettings(micro_batch_size=4))
    after, _ = token_logprobs(model, b)
    m = b.mask_BT.bool()
    assert after[m].mean() > before[m].mean()
    assert stats["grad_norm"] > 0 and 0 <= stats["clip_frac_high"] <= 1


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
def test_logged_loss_and_entropy_do_not_depend_on_micro_batching(tiny, agg):
    model, _ = tiny
    batch = collate(_episodes(), pad_id=0)
    batch.adv_BT = torch.linspace(-1, 1, batch.size)[:, None] * batch.mask_BT
    stats = []
    for mbs in (8, 2):
        m = copy.deepcopy(model)
        stats.append(
            policy_update(
                m,
                torch.optim.SGD(m.parameters(), lr=0.0),
                None,
                batch,
                UpdateSettings(micro_batch_size=mbs, loss_agg=agg),
            )
        )
    for k in ("policy_loss", "entropy", "approx_kl"):
        assert stats[0][k] == pytest.approx(stats[1][k], rel=1e-5, abs=1e-7), k


def test_bias_corrected_kl_is_k3_weighted_by_the_current_old_ratio(tiny):
    """TRL's use_bias_correction_kl: the KL term of each token is k3 times pi/pi_old, by hand."""
    model, _ = tiny
    b = collate(_episodes()[:3], pad_id=0)
    b.adv_BT = torch.zeros_like(b.mask_BT)  # no policy-gradient term: the loss is the KL term alone
    logp, _ = token_logprobs(model, b)
    logp = logp.detach()
    g = torch.Generator().manual_seed(1)
    b.old_logp_BT = logp + 0.3 * torch.randn(logp.shape, generator=g)
    b.ref_logp_BT = logp + 0.5 * torch.randn(logp.shape, generator=g)
    m, norm = b.mask_BT, LossNorm.of(b.mask_BT)
    d = b.ref_logp_BT - logp
    k3 = d.exp() - d - 1
    ratio = (logp - b.old_logp_BT).exp()
    s = UpdateSettings(kl_coef=1.0, share_prefix=False, dual_clip=None)
    plain = float(ppo_loss(model, b, norm, s)[0].detach())
    assert plain == pytest.approx(float((k3 * m).sum() / m.sum()), rel=1e-4)
    s.kl_bias_correction = True
    weighted = float(ppo_loss(model, b, norm, s)[0].detach())
    assert weighted == pytest.approx(float((k3 * ratio * m).sum() / m.sum()), rel=1e-4)
    assert abs(weighted - plain) > 1e-3


def test_micro_batch_normalisation_is_each_micro_batchs_mean_weighted_by_its_rows(tiny):
    """verl's form: sum over micro-batches of (token mean within the micro-batch) x (its rows / the step's).
    With one on-policy epoch the PPO loss is -A * ratio (ratio 1), so the gradient is that of
    -sum_mb rows_mb/rows * mean_mb(A * log pi)."""
    model, _ = tiny
    batch = collate(_episodes(), pad_id=0)
    batch.adv_BT = torch.linspace(-1, 1, batch.size)[:, None] * batch.mask_BT
    s = UpdateSettings(micro_batch_size=3, max_grad_norm=1e9, max_response_len=12, norm_scope="micro_batch")
    got = _grads(copy.deepcopy(model), batch, s)
    ref = copy.deepcopy(model)
    total = 0.0
    for i in range(0, batch.size, 3):
        mb = batch.select(slice(i, i + 3))
        logp, _ = token_logprobs(ref, mb)
        m = mb.mask_BT
        total = total - (mb.adv_BT * logp * m).sum() / m.sum() * (mb.size / batch.size)
    total.backward()
    for a, p in zip(got, ref.parameters()):
        torch.testing.assert_close(a, p.grad, atol=1e-6, rtol=1e-4)
    # and it is not the step-wide normaliser (micro-batches hold different numbers of tokens)
    step = _grads(
        copy.deepcopy(model), batch, UpdateSettings(micro_batch_size=3, max_grad_norm=1e9, max_response_len=12)
    )
    assert max(float((a - b).abs().max()) for a, b in zip(got, step)) > 1e-5


@pytest.mark.skipif(not torch.ops.mkldnn._is_mkldnn_bf16_supported(), reason="this CPU has no bf16 instructions")
def test_bf16_autocast_gives_the_float32_gradient_to_bf16_rounding_and_keeps_float32_weights(tiny):
    model, _ = tiny
    batch = collate(_episodes(), pad_id=0)
    batch.adv_BT = torch.linspace(-1, 1, batch.size)[:, None] * batch.mask_BT
    fp32 = _grads(copy.deepcopy(model), batch, UpdateSettings(micro_batch_size=4, max_grad_norm=1e9))
    bf16_model = copy.deepcopy(model)
    bf16 = _grads(bf16_model, batch, UpdateSettings(micro_batch_size=4, max_grad_norm=1e9, autocast="bf16"))
    assert all(p.dtype == torch.float32 and p.grad.dtype == torch.float32 for p in bf16_model.parameters())
    flat = lambda gs: torch.cat([g.flatten() for g in gs])
    rel = float((flat(bf16) - flat(fp32)).norm() / flat(fp32).norm())
    assert 0 < rel < 0.05  # bf16 has 8 bits of mantissa: not equal, but the same gradient


def test_bf16_autocast_is_refused_where_the_cpu_has_no_bf16(monkeypatch):
    from tempering.errors import UserError
    from tempering.train.update import check_autocast

    check_autocast("none", torch.device("cpu"))
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)
    with pytest.raises(UserError, match="loss.autocast=bf16: this CPU has no bf16"):
        check_autocast("bf16", torch.device("cpu"))
