"""The sampling call's prompt options `target_prompt_logprobs` and `prompt_alt_tokens_k`, driven by the `tinker`
SDK (and tinker-cookbook's own `sample_decision`) against `tempering serve tinker` on the tiny model, checked
against the model's logits computed here: the service's weights are the tiny model's at its seed (a fresh
LoRA adapter adds B = 0)."""

from __future__ import annotations

import asyncio
import os

import numpy as np
import pytest

tinker = pytest.importorskip(
    "tinker", reason="the Tinker SDK is in the `tinker` extra: pip install 'tempering[tinker]'"
)
pytest.importorskip("fastapi", reason="the service needs fastapi and uvicorn (the `tinker` extra)")
import torch  # noqa: E402
from test_tinker import BASE, lora_sampler, service  # noqa: E402
from tinker import types  # noqa: E402

from tempering.models.io import load_policy  # noqa: E402
from tempering.serve.tinker import models  # noqa: E402
from tempering.serve.tinker.wire import Targets  # noqa: E402

TEXT = "What is 3 + 4? 3 + 4 = 7."


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    os.environ.setdefault("TINKER_API_KEY", "tml-local")  # the SDK wants a key; this service reads none
    with service(tmp_path_factory.mktemp("tinker"), max_request_mb=8.0) as url:
        yield tinker.ServiceClient(base_url=url)


@pytest.fixture(scope="module")
def logits():
    """The served model's next-token logits at each prompt position after the first, (len(tokens) - 1, V)."""
    module, _ = load_policy(BASE, seed=0)  # the service's `seed` (0) makes the same weights
    module.eval()

    def of(tokens: list[int]) -> torch.Tensor:
        with torch.no_grad():
            return module(input_ids=torch.tensor([tokens])).logits[0, :-1].float()

    return of


@pytest.fixture(scope="module")
def sampler(client):
    _, prompt, sampler = lora_sampler(client, TEXT)
    return prompt, sampler


def one_prefill(sampler, prompt, **options) -> types.SampleResponse:
    params = types.SamplingParams(max_tokens=1, **options.pop("params", {}))
    return sampler.sample(types.ModelInput.from_ints(prompt), num_samples=1, sampling_params=params, **options).result()


def test_target_prompt_logprobs_are_the_models_in_the_requests_layout(sampler, logits):
    """Dense and sparse CSR requests: each asked cell holds log p(id | prompt[: i + 1]) at row i, a -1 cell
    (or an unlisted one) 0.0; the answer keeps the request's shape and layout; `prompt_logprobs_last_n` does
    not limit it; the other prompt options come in the same answer."""
    prompt, sampler = sampler
    logp = logits(prompt).log_softmax(-1)
    rows = len(prompt) - 1
    rng = np.random.default_rng(0)
    ids = rng.integers(0, logp.shape[1], (rows, 3))
    ids[:, 0] = prompt[1:]  # the prompt's own tokens: their log-probs are prompt_logprobs too
    ids[::2, 2] = -1
    res = one_prefill(
        sampler,
        prompt,
        include_prompt_logprobs=True,
        prompt_logprobs_last_n=2,
        topk_prompt_logprobs=2,
        prompt_alt_tokens_k=2,
        target_prompt_logprobs=types.TensorData.from_numpy(ids),
    )
    got = res.target_prompt_logprobs
    assert got is not None and got.dtype == "float32" and got.shape == [rows, 3] and got.sparse_crow_indices is None
    want = np.where(ids >= 0, logp.gather(1, torch.from_numpy(ids).clamp(min=0)).numpy(), 0.0)
    np.testing.assert_allclose(got.to_numpy(), want, atol=1e-5)
    assert (got.to_numpy()[::2, 2] == 0.0).all()
    np.testing.assert_allclose(res.prompt_logprobs[-2:], got.to_numpy()[-2:, 0], atol=1e-5)
    assert res.prompt_logprobs[:-2] == [None] * (len(prompt) - 2)
    assert res.topk_prompt_logprobs is not None and res.prompt_alt_tokens is not None

    sparse = torch.full((rows, 4), -1, dtype=torch.int64)
    sparse[3, 1], sparse[3, 3], sparse[rows - 1, 0] = 7, 42, 13
    request = types.TensorData.from_torch_sparse(sparse, pad_value=-1)
    assert request.sparse_crow_indices is not None  # sent sparse, answered sparse
    got = one_prefill(sampler, prompt, target_prompt_logprobs=request).target_prompt_logprobs
    assert got is not None and got.shape == [rows, 4] and got.dtype == "float32"
    assert got.sparse_crow_indices == request.sparse_crow_indices
    assert got.sparse_col_indices == request.sparse_col_indices
    dense = got.to_torch()  # unlisted cells: 0.0
    want = torch.zeros(rows, 4)
    want[3, 1], want[3, 3], want[rows - 1, 0] = logp[3, 7], logp[3, 42], logp[rows - 1, 13]
    torch.testing.assert_close(dense, want, atol=1e-5, rtol=0)


def test_cookbooks_decision_sampler_gets_the_models_label_probabilities(client, logits):
    """tinker-cookbook's `sample_decision` (its decisions recipe: one sparse `target_prompt_logprobs` request at
    the answer position) against the service: each label's probability is the softmax of the model's logits of
    the label tokens there."""
    from tinker_cookbook import renderers
    from tinker_cookbook.recipes.decisions.decision import Decision, DecisionRenderer, sample_decision

    tc, _, sampler = lora_sampler(client, "")
    renderer = DecisionRenderer(renderers.get_renderer("role_colon", tc.get_tokenizer()))
    rendering = renderer.render(Decision("Which sum is 7?", [("3+4", ""), ("2+2", ""), ("1+5", "")]))
    probs = asyncio.run(sample_decision(sampler, rendering))
    label_ids = [rendering.label_tokens[label] for label in rendering.labels]
    want = logits(rendering.tokens)[rendering.choice_pos - 1, label_ids].softmax(-1)
    np.testing.assert_allclose(list(probs.values()), want.numpy(), atol=1e-5)


def total_variation(counts: np.ndarray, p: torch.Tensor) -> np.ndarray:
    """Per row: half the L1 distance between the draws' frequencies (rows, V) and the distributions p (rows, V)."""
    return 0.5 * np.abs(counts / counts.sum(1, keepdims=True) - p.numpy()).sum(1)


def test_prompt_alt_tokens_are_draws_from_the_models_distribution_at_the_temperature(sampler, logits):
    """`k` draws at each prompt position after the first: their log-probs the model's own, their frequencies
    within sampling error of softmax(logits / T) at that row (and far from the wrong temperature's and from the
    neighbouring position's, so the check can tell); the request's seed fixes them; T = 0 is the argmax."""
    prompt, sampler = sampler
    lg = logits(prompt)
    rows, vocab = lg.shape
    k = 20_000  # sampling error of the total variation: about 0.4 sqrt(V / k) = 0.03 at V = 101
    draws = {}
    for t in (1.0, 0.5):
        alt = one_prefill(
            sampler, prompt, prompt_alt_tokens_k=k, params={"temperature": t, "seed": 5}
        ).prompt_alt_tokens
        assert alt is not None and alt.tokens.dtype == "int64" and alt.logprobs.dtype == "float32"
        assert alt.tokens.shape == alt.logprobs.shape == [rows, k]
        ids = alt.tokens.to_torch()
        torch.testing.assert_close(alt.logprobs.to_torch(), lg.log_softmax(-1).gather(1, ids), atol=1e-5, rtol=0)
        counts = np.stack([np.bincount(r, minlength=vocab) for r in ids.numpy()])
        assert total_variation(counts, (lg / t).softmax(-1)).max() < 0.045, t
        assert total_variation(counts, (lg / (1.5 - t)).softmax(-1)).mean() > 0.07, t  # the other temperature
        assert total_variation(counts[1:], (lg[:-1] / t).softmax(-1)).mean() > 0.07, t  # the row before
        draws[t] = ids

    again = one_prefill(sampler, prompt, prompt_alt_tokens_k=k, params={"temperature": 1.0, "seed": 5})
    assert torch.equal(again.prompt_alt_tokens.tokens.to_torch(), draws[1.0])
    other = one_prefill(sampler, prompt, prompt_alt_tokens_k=8, params={"temperature": 1.0, "seed": 6})
    assert not torch.equal(other.prompt_alt_tokens.tokens.to_torch(), draws[1.0][:, :8])
    greedy = one_prefill(sampler, prompt, prompt_alt_tokens_k=3, params={"temperature": 0.0})
    assert (greedy.prompt_alt_tokens.tokens.to_torch() == lg.argmax(-1, keepdim=True)).all()


def test_bad_prompt_options_are_refused_naming_the_problem(client, sampler):
    prompt, sampler = sampler
    rows = len(prompt) - 1
    ok = np.zeros((rows, 2), dtype=np.int64)
    bad_sparse = types.TensorData(
        data=[5, 6], dtype="int64", shape=[rows, 2], sparse_crow_indices=[0] * rows + [2], sparse_col_indices=[1, 0]
    )
    cases = {
        "outside the vocabulary [0, 101)": types.TensorData.from_numpy(ok + [[0, 101]]),
        f"has 3 rows; a prompt of {len(prompt)} tokens needs {rows}": types.TensorData.from_numpy(ok[:3]),
        "names no token id (every cell is -1": types.TensorData.from_numpy(ok - 1),
        "holds -2 (row 0): a token id, or -1 to ask nothing": types.TensorData.from_numpy(ok - 2),
        "sparse CSR indices do not fit the shape": bad_sparse,
    }
    for expect, target in cases.items():
        with pytest.raises(tinker.BadRequestError) as e:
            one_prefill(sampler, prompt, target_prompt_logprobs=target)
        assert e.value.status_code == 400 and "target_prompt_logprobs" in str(e.value) and expect in str(e.value)
    with pytest.raises(tinker.APIStatusError) as e:  # an answer over max_request_mb=8
        one_prefill(sampler, prompt, prompt_alt_tokens_k=20_000_000)
    assert e.value.status_code == 413 and "prompt_alt_tokens_k" in str(e.value)
    stable = client.create_sampling_client(base_model=BASE, record_stability_info=True).result()
    with pytest.raises(tinker.BadRequestError) as e:
        one_prefill(stable, prompt)
    assert "record_stability_info is not implemented" in str(e.value) and "stable_reinforce" in str(e.value)
    # a base model not loaded yet: the same message, through the request's future
    base = client.create_sampling_client(base_model=BASE).result()
    with pytest.raises(tinker.RequestFailedError, match=r"outside the vocabulary \[0, 101\)"):
        one_prefill(base, prompt, target_prompt_logprobs=cases["outside the vocabulary [0, 101)"])
    assert one_prefill(sampler, prompt, target_prompt_logprobs=types.TensorData.from_numpy(ok)).sequences


def test_every_prompt_option_comes_from_one_forward_pass():
    module, tok = load_policy(BASE, seed=0)
    calls = []
    module.register_forward_hook(lambda *_: calls.append(1))
    tokens = tok.encode(TEXT, add_special_tokens=False)
    n = len(tokens) - 1
    targets = Targets(np.arange(n), np.asarray(tokens[1:]), [n, 1])
    scores = models.score_prompt(module, tokens, None, topk=2, targets=targets, alt_k=3, seed=1)
    assert len(calls) == 1
    assert scores.topk is not None and scores.alt is not None and scores.alt[0].shape == (n, 3)
    np.testing.assert_allclose(scores.targets, scores.logprobs[1:], atol=1e-6)
