"""Shared-prefix log-probs equal the plain forward: values, entropy and gradients, for the sampled tokens
and for whole next-token distributions."""

import torch

from tempering.models import tiny_model
from tempering.train.batch import TrainBatch, collate
from tempering.train.prefix import shared_prefix_logprobs, shared_prefix_vocab_logprobs, split_prefixes
from tempering.train.update import token_logprobs, vocab_logprobs
from tempering.types import Episode, Task, Turn


def episodes() -> list[Episode]:
    """Three groups of three (prompts of different lengths), one episode with a feedback turn."""
    g = torch.Generator().manual_seed(0)
    eps = []
    for k, plen in enumerate((4, 7, 5)):
        prompt = torch.randint(4, 30, (plen,), generator=g).tolist()
        for i in range(3):
            n = 1 + (3 * k + i) % 5
            turns = [Turn(torch.randint(4, 30, (n,), generator=g).tolist(), [-1.0] * n)]
            if k == 2 and i == 0:
                turns[0].feedback_ids = [7, 8, 9]
                turns.append(Turn([11, 12], [-1.0, -1.0]))
            eps.append(Episode(Task(str(k), ""), prompt, turns))
    return eps


def test_rows_are_grouped_by_the_tokens_before_their_first_trained_token():
    ids = torch.tensor([[1, 5, 6, 9, 0], [1, 5, 6, 8, 3], [1, 5, 7, 8, 0]])
    mask = torch.tensor([[0, 0, 0, 1, 0], [0, 0, 0, 1, 1], [0, 0, 1, 1, 0]], dtype=torch.float32)
    att = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1], [1, 1, 1, 1, 0]])
    batch = TrainBatch(ids, att, mask, torch.zeros(3, 5), torch.zeros(3, 5, dtype=torch.long))
    plen, prefixes, owner = split_prefixes(batch)
    assert plen.tolist() == [3, 3, 2]
    assert prefixes == [(1, 5, 6), (1, 5)] and owner.tolist() == [0, 0, 1]


def test_values_entropy_and_gradients_match_the_plain_forward():
    model = tiny_model("tiny-xs", seed=0)
    batch = collate(episodes(), pad_id=0)
    m = batch.mask_BT
    want, want_ent = token_logprobs(model, batch, temperature=0.7, entropy=True)
    got, got_ent = shared_prefix_logprobs(model, batch, temperature=0.7, entropy=True)
    torch.testing.assert_close(got * m, want.detach() * m, atol=2e-6, rtol=1e-5)
    torch.testing.assert_close(got_ent * m, want_ent * m, atol=2e-6, rtol=1e-5)
    # positions off the mask but inside a row (feedback, later turns) are predicted too
    inside = batch.attention_BT.bool() & (torch.arange(batch.input_ids_BT.shape[1]) > 8)
    torch.testing.assert_close(got[inside], want.detach()[inside], atol=2e-6, rtol=1e-5)

    grads = []
    for fn in (token_logprobs, shared_prefix_logprobs):
        model.zero_grad()
        ((fn(model, batch)[0] * m).sum()).backward()
        grads.append({k: p.grad.clone() for k, p in model.named_parameters()})
    for k in grads[0]:
        torch.testing.assert_close(grads[1][k], grads[0][k], atol=1e-5, rtol=1e-4)


def test_no_shared_prefix_falls_back():
    batch = collate(episodes(), pad_id=0).select(torch.tensor([0, 3, 6]))  # one row of each group
    assert shared_prefix_logprobs(tiny_model("tiny-xs", seed=0), batch) is None


def test_whole_distributions_and_their_gradients_match_the_plain_forward():
    model = tiny_model("tiny-xs", seed=0)
    batch = collate(episodes(), pad_id=0)
    m = batch.mask_BT[..., None]
    want = vocab_logprobs(model, batch, temperature=0.7)
    got = vocab_logprobs(model, batch, temperature=0.7, share_prefix=True)
    assert got.shape == want.shape
    torch.testing.assert_close(got * m, want.detach() * m, atol=2e-6, rtol=1e-5)
    inside = batch.attention_BT.bool() & (torch.arange(batch.input_ids_BT.shape[1]) > 8)  # feedback, turn 2
    torch.testing.assert_close(got[inside], want.detach()[inside], atol=2e-6, rtol=1e-5)
    weights = torch.randn(want.shape, generator=torch.Generator().manual_seed(1))  # a loss on every token
    grads = []
    for share in (False, True):
        model.zero_grad()
        ((vocab_logprobs(model, batch, 0.7, share_prefix=share) * weights * m).sum()).backward()
        grads.append({k: p.grad.clone() for k, p in model.named_parameters()})
    for k in grads[0]:
        torch.testing.assert_close(grads[1][k], grads[0][k], atol=1e-5, rtol=1e-4)
    one_each = batch.select(torch.tensor([0, 3, 6]))
    assert shared_prefix_vocab_logprobs(model, one_each) is None  # nothing shared: the plain forward
