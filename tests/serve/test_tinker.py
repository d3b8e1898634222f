"""`tempering serve tinker` driven by the real client: the `tinker` SDK (pinned in the `tinker` extra) and
tinker-cookbook's own `sl_loop.py` / `rl_loop.py`, unchanged, on a tiny model and local data."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from pathlib import Path

import numpy as np
import pytest

tinker = pytest.importorskip(
    "tinker", reason="the Tinker SDK is in the `tinker` extra: pip install 'tempering[tinker]'"
)
pytest.importorskip("fastapi", reason="the service needs fastapi and uvicorn (the `tinker` extra)")
import httpx  # noqa: E402  (the SDK's own HTTP client, a dependency of `tinker`)
import uvicorn  # noqa: E402
from tinker import types  # noqa: E402

from tempering.serve.tinker import cookbook as local  # noqa: E402
from tempering.serve.tinker.app import create_app  # noqa: E402
from tempering.serve.tinker.config import TinkerConfig  # noqa: E402
from tempering.serve.tinker.engine import Engine  # noqa: E402

BASE = "tiny-s"
COOKBOOK_NAME = "meta-llama/Llama-3.2-1B"  # the cookbook's smallest Llama, here run by the tiny model


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def service(state: Path, **settings):
    """The service in this process (uvicorn on a thread), as `tempering serve tinker` runs it."""
    cfg = TinkerConfig(port=free_port(), state_dir=str(state), threads=1, **settings)
    engine = Engine(cfg)
    engine.start()
    server = uvicorn.Server(uvicorn.Config(create_app(cfg, engine), host=cfg.host, port=cfg.port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not server.started:
        assert thread.is_alive() and time.time() < deadline, "the service did not start"
        time.sleep(0.05)
    try:
        yield f"http://{cfg.host}:{cfg.port}"
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture(scope="module")
def state(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("tinker")


@pytest.fixture(scope="module")
def url(state):
    os.environ.setdefault("TINKER_API_KEY", "tml-local")  # the SDK wants a key; this service reads none
    with service(state, max_request_mb=1.0) as u:
        yield u


@pytest.fixture(scope="module")
def client(url):
    return tinker.ServiceClient(base_url=url)


def sft_datum(tok, text: str) -> types.Datum:
    ids = tok.encode(text, add_special_tokens=False)
    return types.Datum(
        model_input=types.ModelInput.from_ints(ids[:-1]),
        loss_fn_inputs={"target_tokens": ids[1:], "weights": [1.0] * (len(ids) - 1)},
    )


def logprobs_of(tc, tokens: list[int]) -> np.ndarray:
    """The trainer's log p(tokens[i] | tokens[:i]) for i >= 1, from a forward pass."""
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "weights": [0.0] * (len(tokens) - 1)},
    )
    out = tc.forward([datum], "cross_entropy").result()
    return np.asarray(out.loss_fn_outputs[0]["logprobs"].data)


@pytest.mark.slow
def test_lora_client_trains_and_samples_with_the_trainers_logprobs(client):
    tc = client.create_lora_training_client(base_model=BASE, rank=4).result()
    info = tc.get_info()
    assert info.model_data.model_name == BASE and info.is_lora and info.lora_rank == 4
    tok = tc.get_tokenizer()
    datum = sft_datum(tok, "2+3=5. 4+4=8.")
    losses = []
    for _ in range(4):
        fb = tc.forward_backward([datum], "cross_entropy")
        step = tc.optim_step(types.AdamParams(learning_rate=1e-2))
        losses.append(fb.result().metrics["loss:sum"])
        assert step.result().metrics["grad_norm"] > 0
    assert losses[-1] < losses[0] * 0.8, losses

    sampler = tc.save_weights_and_get_sampling_client().result()
    prompt = tok.encode("2+3=", add_special_tokens=False)
    res = sampler.sample(
        types.ModelInput.from_ints(prompt), num_samples=3, sampling_params=types.SamplingParams(max_tokens=6, seed=1)
    ).result()
    assert len(res.sequences) == 3
    for seq in res.sequences:
        assert 1 <= len(seq.tokens) <= 6 and len(seq.logprobs) == len(seq.tokens)
        trainer = logprobs_of(tc, prompt + seq.tokens)[len(prompt) - 1 :]
        np.testing.assert_allclose(seq.logprobs, trainer, atol=1e-4)
    # the prompt's log-probs, as the sampler computes them, are the trainer's too
    full = prompt + res.sequences[0].tokens
    lp = sampler.compute_logprobs(types.ModelInput.from_ints(full)).result()
    assert lp[0] is None
    np.testing.assert_allclose(lp[1:], logprobs_of(tc, full), atol=1e-4)


@pytest.mark.parametrize("loss_fn", ["importance_sampling", "ppo", "cispo", "gspo"])
def test_policy_losses_at_ratio_one(client, loss_fn):
    """With the sampler's log-probs equal to the trainer's (ratio 1, nothing clipped), each policy loss's value
    is known without the service's code: -sum(A) for the ratio losses, -sum(A log p) for CISPO (Tinker's
    documented `-(sg(clip(ratio)) * A * log p).sum()`)."""
    tc = client.create_lora_training_client(base_model=BASE, rank=2).result()
    tokens = tc.get_tokenizer().encode("What is 2+2? 4", add_special_tokens=False)
    old = logprobs_of(tc, tokens)
    n, prompt = len(tokens) - 1, 8
    adv = np.zeros(n, dtype=np.float32)
    adv[prompt:] = 0.5
    inputs = {
        "target_tokens": tokens[1:],
        "logprobs": types.TensorData.from_numpy(old.astype(np.float32)),
        "advantages": types.TensorData.from_numpy(adv),
    }
    if loss_fn == "gspo":
        inputs["sequence_ratio_mask"] = types.TensorData.from_numpy((adv != 0).astype(np.float32))
    datum = types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]), loss_fn_inputs=inputs)
    out = tc.forward_backward([datum], loss_fn).result()
    expected = -float((adv * old).sum()) if loss_fn == "cispo" else -float(adv.sum())
    assert out.metrics["loss:sum"] == pytest.approx(expected, rel=1e-4)
    assert tc.optim_step(types.AdamParams(learning_rate=1e-3)).result().metrics["grad_norm"] > 0


def test_forward_backward_custom_round_trip(client):
    """The SDK computes the custom loss on the returned log-probs and sends its gradient back as weights."""
    tc = client.create_lora_training_client(base_model=BASE, rank=2).result()
    tokens = tc.get_tokenizer().encode("abcabcabc", add_special_tokens=False)
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "weights": [1.0] * (len(tokens) - 1)},
    )
    before = logprobs_of(tc, tokens)
    out = tc.forward_backward_custom([datum], lambda data, lps: (-2.0 * lps[0].sum(), {"n": float(len(lps))})).result()
    assert out.metrics["n"] == 1.0
    np.testing.assert_allclose(out.loss_fn_outputs[0]["logprobs"].to_numpy(), before, atol=1e-5)
    tc.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    assert logprobs_of(tc, tokens).sum() > before.sum()


def test_clients_at_once_keep_their_own_weights(client):
    """Two training clients (LoRA and full) on the same base: one's steps leave the other's log-probs as they were."""
    a = client.create_lora_training_client(base_model=BASE, rank=4).result()
    b = client.create_lora_training_client(base_model="tiny-xs", rank=8).result()
    tokens = a.get_tokenizer().encode("hello world", add_special_tokens=False)
    a0, b0 = logprobs_of(a, tokens), logprobs_of(b, tokens)
    datum = sft_datum(a.get_tokenizer(), "hello world")
    futures = []
    for _ in range(3):
        futures += [b.forward_backward([datum], "cross_entropy"), b.optim_step(types.AdamParams(learning_rate=1e-2))]
    [f.result() for f in futures]
    np.testing.assert_allclose(logprobs_of(a, tokens), a0, atol=1e-6)
    assert logprobs_of(b, tokens).sum() > b0.sum()


@pytest.mark.slow
def test_state_survives_a_restart_of_the_service(client, state):
    """save_state, then a new service process on the same state folder resumes the model with its optimizer."""
    tc = client.create_lora_training_client(base_model=BASE, rank=4).result()
    datum = sft_datum(tc.get_tokenizer(), "a checkpoint")
    tc.forward_backward([datum], "cross_entropy").result()
    tc.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    path = tc.save_state("after-one-step").result().path
    assert path.startswith("tinker://")
    tokens = datum.model_input.to_ints() + [datum.loss_fn_inputs["target_tokens"].tolist()[-1]]
    saved = logprobs_of(tc, tokens)
    # load_state into the same client undoes a later step
    tc.forward_backward([datum], "cross_entropy").result()
    tc.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    tc.load_state(path).result()
    np.testing.assert_allclose(logprobs_of(tc, tokens), saved, atol=1e-6)

    with service(state) as url2:
        again = tinker.ServiceClient(base_url=url2).create_training_client_from_state_with_optimizer(path).result()
        np.testing.assert_allclose(logprobs_of(again, tokens), saved, atol=1e-6)
        again.forward_backward([datum], "cross_entropy").result()
        assert again.optim_step(types.AdamParams(learning_rate=1e-2)).result().metrics["grad_norm"] > 0


def bad_datum(tok, problem: str) -> types.Datum:
    ids = tok.encode("1+1=2", add_special_tokens=False)
    targets, inputs = ids[1:], ids[:-1]
    if problem == "length":
        targets = targets[:-1]
    if problem == "vocab":
        inputs = [*inputs[:-1], 10**6]
    return types.Datum(
        model_input=types.ModelInput.from_ints(inputs),
        loss_fn_inputs={"target_tokens": targets, "weights": [1.0] * len(targets)},
    )


BAD = {
    "unknown_model": "unknown base model 'no-such/model'",
    "unsupported_loss": "loss_fn='stable_reinforce' is not supported",
    "unknown_loss": "unknown loss_fn 'nope'",
    "mismatched_lengths": "has shape (3,); model_input has 4 tokens",
    "token_beyond_vocab": "token id 1000000 is outside the vocabulary",
}


def test_bad_input_is_a_user_error_naming_it_and_the_service_goes_on(client):
    tc = client.create_lora_training_client(base_model=BASE, rank=2).result()
    tok = tc.get_tokenizer()
    for call, expect in BAD.items():
        with pytest.raises(tinker.BadRequestError) as e:
            if call == "unknown_model":
                client.create_lora_training_client(base_model="no-such/model", rank=2).result()
            elif call in ("unsupported_loss", "unknown_loss"):
                loss = "stable_reinforce" if call == "unsupported_loss" else "nope"
                tc.forward_backward([sft_datum(tok, "1+1=2")], loss).result()  # type: ignore[arg-type]
            else:
                problem = "length" if call == "mismatched_lengths" else "vocab"
                tc.forward_backward([bad_datum(tok, problem)], "cross_entropy").result()
        assert e.value.status_code == 400 and expect in str(e.value), call
        assert e.value.body == {"error": e.value.body["error"], "category": "user"}  # the SDK's error format
        # the same client, after its refused request, still trains (its later seq ids run)
        out = tc.forward_backward([sft_datum(tok, "1+1=2")], "cross_entropy").result()
        assert out.metrics["loss:sum"] > 0


def lora_sampler(client, text: str):
    """A fresh LoRA client on the base model, `text`'s tokens and a sampling client on its weights."""
    tc = client.create_lora_training_client(base_model=BASE, rank=2).result()
    prompt = tc.get_tokenizer().encode(text, add_special_tokens=False)
    return tc, prompt, tc.save_weights_and_get_sampling_client().result()


def test_topk_prompt_logprobs_are_the_trainers_likeliest_tokens(client):
    """The SDK's `topk_prompt_logprobs` (what the cookbook's off-policy distillation asks a teacher for): at
    each prompt position k tokens in falling order, their log-probs the trainer's own for those tokens, and
    no token of the prompt that is left out likelier than the k-th."""
    k = 4
    tc, prompt, sampler = lora_sampler(client, "What is 3 + 4? 3 + 4 = 7.")
    res = sampler.sample(
        types.ModelInput.from_ints(prompt),
        num_samples=1,
        sampling_params=types.SamplingParams(max_tokens=1),
        include_prompt_logprobs=True,
        topk_prompt_logprobs=k,
    ).result()
    top = res.topk_prompt_logprobs
    assert top is not None and len(top) == len(prompt) and top[0] is None
    ids = np.array([[t for t, _ in row] for row in top[1:]])
    lps = np.array([[lp for _, lp in row] for row in top[1:]])
    assert ids.shape == (len(prompt) - 1, k) and (np.diff(lps, axis=1) <= 0).all()
    for j in range(k):  # the trainer's forward, scoring the j-th likeliest token at every position
        datum = types.Datum(
            model_input=types.ModelInput.from_ints(prompt[:-1]),
            loss_fn_inputs={"target_tokens": ids[:, j].tolist(), "weights": [0.0] * (len(prompt) - 1)},
        )
        trainer = np.asarray(tc.forward([datum], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].data)
        np.testing.assert_allclose(lps[:, j], trainer, atol=1e-4)
    own = np.asarray(res.prompt_logprobs[1:])
    left_out = ~(ids == np.asarray(prompt[1:])[:, None]).any(1)
    assert left_out.any() and (own[left_out] <= lps[left_out, -1] + 1e-5).all()


def test_topk_sample_logprobs_are_the_trainers_likeliest_tokens(client):
    """The SDK's `topk_sample_logprobs`: at each sampled position k tokens in falling order with the trainer's
    log-probs for them, the sampled token among them whenever its log-prob reaches the k-th's, with the value
    the sampler gave it; at a top_k below k, only that many tokens (the rest are what the sampler cannot draw)."""
    k = 5
    tc, prompt, sampler = lora_sampler(client, "What is 3 + 4?")
    res = sampler.sample(
        types.ModelInput.from_ints(prompt),
        num_samples=2,
        sampling_params=types.SamplingParams(max_tokens=6, seed=3),
        topk_sample_logprobs=k,
    ).result()
    assert res.topk_prompt_logprobs is None
    for seq in res.sequences:
        top = seq.topk_logprobs
        assert top is not None and len(top) == len(seq.tokens) and all(len(row) == k for row in top)
        ids = np.array([[t for t, _ in row] for row in top])
        lps = np.array([[lp for _, lp in row] for row in top])
        assert (np.diff(lps, axis=1) <= 0).all()
        full = prompt + seq.tokens
        for j in range(k):  # the trainer's forward, scoring the j-th likeliest token at every sampled position
            datum = types.Datum(
                model_input=types.ModelInput.from_ints(full[:-1]),
                loss_fn_inputs={
                    "target_tokens": [*full[1 : len(prompt)], *ids[:, j]],
                    "weights": [0.0] * (len(full) - 1),
                },
            )
            trainer = tc.forward([datum], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_numpy()
            np.testing.assert_allclose(lps[:, j], trainer[len(prompt) - 1 :], atol=1e-4)
        for t, lp, row_ids, row_lps in zip(seq.tokens, seq.logprobs, ids, lps, strict=True):
            if lp >= row_lps[-1] + 1e-4:
                assert t in row_ids and abs(row_lps[list(row_ids).index(t)] - lp) < 1e-4
    narrow = (
        sampler.sample(
            types.ModelInput.from_ints(prompt),
            num_samples=1,
            sampling_params=types.SamplingParams(max_tokens=4, seed=3, top_k=2),
            topk_sample_logprobs=k,
        )
        .result()
        .sequences[0]
    )
    assert narrow.topk_logprobs is not None and all(len(row) == 2 for row in narrow.topk_logprobs)
    for t, row in zip(narrow.tokens, narrow.topk_logprobs, strict=True):
        assert t in [i for i, _ in row]


def test_image_chunks_are_refused_naming_the_call(client):
    """The served models are text-only: an image chunk in a prompt or a datum is a user error naming the call."""
    tc = client.create_lora_training_client(base_model=BASE, rank=2).result()
    tok = tc.get_tokenizer()
    ids = tok.encode("What is in the picture?", add_special_tokens=False)
    image = types.ImageChunk(data=b"\x89PNG\r\n\x1a\n", format="png", expected_tokens=4)
    model_input = types.ModelInput(chunks=[types.EncodedTextChunk(tokens=ids), image])
    sampler = tc.save_weights_and_get_sampling_client().result()
    with pytest.raises(tinker.BadRequestError) as e:
        sampler.sample(model_input, num_samples=1, sampling_params=types.SamplingParams(max_tokens=2)).result()
    assert "sample: the prompt has image chunks; the served models are text-only" in str(e.value)
    datum = types.Datum(
        model_input=model_input,
        loss_fn_inputs={"target_tokens": [0] * model_input.length, "weights": [0.0] * model_input.length},
    )
    with pytest.raises(tinker.BadRequestError) as e:
        tc.forward_backward([datum], "cross_entropy").result()
    assert "forward_backward: data[0].model_input has image chunks; the served models are text-only" in str(e.value)


def test_unimplemented_call_is_named_in_the_sdks_error_format(client, url):
    with pytest.raises(tinker.NotFoundError) as e:
        client.create_rest_client().list_training_runs().result()
    assert "is not implemented by tempering's Tinker service" in str(e.value) and "training_runs" in str(e.value)
    r = httpx.post(f"{url}/api/v1/copy_weights", json={})
    assert r.status_code == 404 and r.json()["category"] == "user" and "ServiceClient.copy_weights" in r.json()["error"]
    assert httpx.get(f"{url}/api/v1/healthz").json() == {"status": "ok"}


def test_request_over_the_size_limit_is_refused(url):
    r = httpx.post(
        f"{url}/api/v1/create_session",
        content=b"{" + b" " * (2 << 20) + b"}",
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 413 and "max_request_mb=1.0" in r.json()["error"]


# -- tinker-cookbook's own loops, unchanged, against `tempering serve tinker` ------------------------------


@pytest.fixture(scope="module")
def cookbook(tmp_path_factory):
    """The CLI service with the cookbook's Llama name on the tiny model, and a working folder holding what the
    loops load by name (the tokenizer, local datasets in the recipes' own formats)."""
    pytest.importorskip(
        "tinker_cookbook", reason="tinker-cookbook is installed by `make install-test` (see the tinker extra)"
    )
    work = tmp_path_factory.mktemp("cookbook")
    with local.serving(work / "state", {COOKBOOK_NAME: BASE}, "threads=1") as url:
        yield url, local.prepare(work / "run", work / "state", COOKBOOK_NAME)


@pytest.mark.slow
def test_cookbook_sl_loop_lowers_the_loss(cookbook):
    url, folder = cookbook
    rows = local.run_loop(
        "sl_loop", folder, url, COOKBOOK_NAME, "batch_size=8", "max_steps=4", "lora_rank=8", "learning_rate=3e-3"
    )
    nll = [r["train_mean_nll"] for r in rows]
    assert len(nll) == 4 and nll[-1] < nll[0] * 0.95, nll


@pytest.mark.slow
def test_cookbook_sl_loop_at_its_default_settings(cookbook, tmp_path):
    """sl_loop.py with every setting as the cookbook ships it (batch 128, LoRA rank 32, learning rate 1e-4, its
    checkpoint cadence) but the model, the service and the data (two passes over the sums: one batch)."""
    url, folder = cookbook
    state = folder.parent / "state"
    rows = local.run_loop(
        "sl_loop", local.prepare(tmp_path, state, COOKBOOK_NAME, repeats=2), url, COOKBOOK_NAME, save_every=None
    )
    assert len(rows) == 1 and rows[0]["num_sequences"] == 128 and np.isfinite(rows[0]["train_mean_nll"]), rows
    final = json.loads((tmp_path / "sl_loop" / "checkpoints.jsonl").read_text().splitlines()[-1])
    assert final["state_path"].startswith("tinker://")


@pytest.mark.slow
def test_cookbook_rl_loop_runs(cookbook):
    """rl_loop's sampling and checkpoints through the service; the random tiny model never writes \\boxed{},
    so its reward is 0 here (a warm-started one below)."""
    url, folder = cookbook
    rows = local.run_loop(
        "rl_loop",
        folder,
        url,
        COOKBOOK_NAME,
        "batch_size=2",
        "group_size=2",
        "max_tokens=8",
        "max_steps=2",
        "loss_fn=importance_sampling",
        "lora_rank=4",
    )
    assert [r["progress/batch"] for r in rows] == [0, 1] and all(r["reward/total"] == 0.0 for r in rows)
    final = json.loads((folder / "rl_loop" / "checkpoints.jsonl").read_text().splitlines()[-1])
    assert final["state_path"].startswith("tinker://") and final["sampler_path"].startswith("tinker://")


@pytest.fixture(scope="module")
def warm_cookbook(tmp_path_factory):
    """The CLI service with the cookbook's Llama name on a tiny model warm-started on the nine small sums as
    rl_loop asks them (built once, cached with the other test fixtures), and its working folder."""
    pytest.importorskip(
        "tinker_cookbook", reason="tinker-cookbook is installed by `make install-test` (see the tinker extra)"
    )
    # the tests' fixture cache (tests/conftest.py's CACHE; `conftest` may name another folder's module here)
    cache = Path(
        os.environ.get("TEMPERING_TEST_CACHE", Path(__file__).resolve().parents[2] / ".tempering-cache" / "tests")
    )

    os.environ.setdefault("TINKER_API_KEY", "tml-local")  # the SDK wants a key; this service reads none
    model = local.warm_start(cache, COOKBOOK_NAME, local.SMALL_SUMS, **local.SMALL_WARM_START)
    work = tmp_path_factory.mktemp("warm")
    with local.serving(work / "state", {COOKBOOK_NAME: str(model)}, "threads=1") as url:
        yield url, local.prepare(work / "run", work / "state", COOKBOOK_NAME, sums=local.SMALL_SUMS)


@pytest.mark.slow
def test_cookbook_rl_loop_grades_real_answers_of_a_warm_started_model(warm_cookbook):
    """rl_loop's own grader finds right `\\boxed{}` answers in what the service samples, so its groups have
    advantages and it trains; the sampler's log-probs are the trainer's."""
    url, folder = warm_cookbook
    rows = local.run_loop(
        "rl_loop",
        folder,
        url,
        COOKBOOK_NAME,
        "batch_size=4",
        "group_size=4",
        "max_tokens=16",
        "max_steps=2",
        "loss_fn=importance_sampling",
        "lora_rank=4",
        "learning_rate=1e-3",
    )
    rewards = [r["reward/total"] for r in rows]
    assert len(rows) == 2 and max(rewards) > 0, rewards
    tc = tinker.ServiceClient(base_url=url).create_lora_training_client(base_model=COOKBOOK_NAME, rank=4).result()
    tok = tc.get_tokenizer()
    tc.forward_backward([sft_datum(tok, "User: What is 2 + 2? Assistant: \\boxed{4}")], "cross_entropy").result()
    tc.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    prompt = tok.encode("User: What is 2 + 2?", add_special_tokens=False)
    sampler = tc.save_weights_and_get_sampling_client().result()
    res = sampler.sample(
        types.ModelInput.from_ints(prompt), num_samples=2, sampling_params=types.SamplingParams(max_tokens=8, seed=1)
    ).result()
    for seq in res.sequences:
        trainer = logprobs_of(tc, prompt + seq.tokens)[len(prompt) - 1 :]
        np.testing.assert_allclose(seq.logprobs, trainer, atol=1e-4)


TEACHER = "meta-llama/Llama-3.1-8B-Instruct"  # the warm-started tiny model, as the cookbook would name a teacher


@pytest.fixture(scope="module")
def distill(tmp_path_factory):
    """The CLI service with a student (the random tiny model, under the cookbook's Llama name) and teachers
    (the warm-started tiny model; `tiny-m` as itself, for the second dataset), and a working folder."""
    pytest.importorskip(
        "tinker_cookbook", reason="tinker-cookbook is installed by `make install-test` (see the tinker extra)"
    )
    cache = Path(
        os.environ.get("TEMPERING_TEST_CACHE", Path(__file__).resolve().parents[2] / ".tempering-cache" / "tests")
    )
    os.environ.setdefault("TINKER_API_KEY", "tml-local")
    # the warm_cookbook fixture's model, from the same cache
    teacher = local.warm_start(cache, COOKBOOK_NAME, local.SMALL_SUMS, **local.SMALL_WARM_START)
    work = tmp_path_factory.mktemp("distill")
    with local.serving(work / "state", {COOKBOOK_NAME: BASE, TEACHER: str(teacher)}, "threads=1") as url:
        yield url, local.prepare(work / "run", work / "state", COOKBOOK_NAME), work / "state"


def logged_calls(state: Path, since: int) -> list[str]:
    """The kinds of the service's requests logged after the first `since`."""
    lines = (state / "requests.jsonl").read_text().splitlines()[since:]
    return [json.loads(line)["kind"] for line in lines]


OPD = ("eval_every=0", "max_tokens=16", "group_size=2", "lora_rank=8", "learning_rate=1e-2", "max_steps=3")


@pytest.mark.slow
def test_cookbook_on_policy_distillation_runs_with_the_teachers_log_probs(distill):
    """on_policy_distillation.py, unchanged: the student samples, the teacher scores the samples
    (`compute_logprobs`), the reverse KL is the per-token advantage of an importance-sampling step. The KL it
    logs is the teacher's (a random student is far from it: were the student's own log-probs returned, it
    would be 0), and its own check of the sampler's log-probs against the trainer's finds them equal."""
    url, folder, state = distill
    before = len((state / "requests.jsonl").read_text().splitlines())
    rows = local.run_loop(
        "distillation.on_policy_distillation", folder, url, COOKBOOK_NAME, f"teacher_model={TEACHER}",
        "dataset=deepmath", "groups_per_batch=4", *OPD, log="opd",
    )  # fmt: skip
    assert [r["progress/batch"] for r in rows] == [0, 1, 2]
    for r in rows:
        assert 1.0 < r["teacher_kl"] < 20.0, r["teacher_kl"]
        assert abs(r["optim/kl_sample_train_v1"]) < 1e-4, r["optim/kl_sample_train_v1"]
    # the SDK's compute_logprobs is a one-token `sample` asking for the prompt's log-probs
    calls = set(logged_calls(state, before))
    assert {"create_model", "sample", "forward_backward", "optim_step", "save_weights_for_sampler"} <= calls, calls


@pytest.mark.slow
def test_cookbook_on_policy_multi_teacher_scores_each_dataset_with_its_teacher(distill):
    """on_policy_multi_teacher.py, unchanged: DeepMath's prompts go to one teacher, Tulu 3's to another; it
    logs the KL to each, and the two differ (different teachers)."""
    url, folder, _ = distill
    rows = local.run_loop(
        "distillation.on_policy_multi_teacher", folder, url, COOKBOOK_NAME,
        f"deepmath_teacher_model={TEACHER}", "tulu3_teacher_model=tiny-m",
        "deepmath_groups_per_batch=2", "tulu3_groups_per_batch=2", *OPD[:-1], "max_steps=2", log="multi",
    )  # fmt: skip
    assert len(rows) == 2
    first = rows[0]
    assert {"teacher_kl/dataset_0", "teacher_kl/dataset_1"} <= first.keys(), sorted(first)
    assert first["teacher_kl/dataset_0"] != first["teacher_kl/dataset_1"]
