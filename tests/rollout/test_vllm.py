"""vLLM backend on the CPU: the mismatch correction (hand-computed), the server protocol against a scripted
local server that answers as vLLM's OpenAI-compatible server does, the recipe's wiring, and bad input.
The real engine is checked by test_vllm_gpu.py (benchmarks/gpu/run_checks.sh)."""

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

from tempering.errors import UserError
from tempering.models import char_tokenizer, tiny_model
from tempering.recipes.runner import trainer
from tempering.rollout.sampler import SamplingParams
from tempering.rollout.sync import SyncError
from tempering.rollout.vllm_sampler import VLLMSampler, VLLMSection, WeightSync


# ---- server mode against a scripted server ------------------------------------------------------
class FakeVLLM(BaseHTTPRequestHandler):
    """Answers /v1/models, /v1/completions (each prompt gets `answer` with log-prob -0.5 per token),
    /collective_rpc through the package's own worker extension (`WeightSync`) on a tiny-xs model:
    `tempering_load_file` loads the weight file it is pointed at, unless `skip_loads` (a sync that fails
    silently), `tempering_fingerprint` reports the sums of what it holds; and /reset_prefix_cache."""

    answer: list[int] = []
    calls: list = []
    dev_mode = True
    skip_loads = False
    model = None

    def _reply(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._reply(200, {"data": [{"id": "policy"}]})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
        self.calls.append((self.path, body))
        if self.path == "/v1/completions":
            n = body["max_tokens"]
            toks = self.answer[:n]
            choices = [
                {
                    "index": i,
                    "finish_reason": "length" if len(self.answer) > n else "stop",
                    "logprobs": {"tokens": [f"token_id:{t}" for t in toks], "token_logprobs": [-0.5] * len(toks)},
                }
                for i, _ in reversed(list(enumerate(body["prompt"])))
            ]  # any order: the client sorts by index
            self._reply(200, {"choices": choices})
        elif not self.dev_mode:
            self._reply(404, {"detail": "Not Found"})
        elif self.path == "/collective_rpc":
            if FakeVLLM.model is None:
                FakeVLLM.model = tiny_model("tiny-xs")
            worker = WeightSync()
            worker.model_runner = SimpleNamespace(model=EngineModel(FakeVLLM.model))
            if body["method"] == "tempering_fingerprint":
                return self._reply(200, {"results": [worker.tempering_fingerprint()]})
            self.calls[-1] = (self.path, body, load_file(body["args"][0]))
            loaded = 0 if FakeVLLM.skip_loads else worker.tempering_load_file(*body["args"])
            self._reply(200, {"results": [loaded]})
        else:
            self._reply(200, {})

    def log_message(self, *a):
        pass


class EngineModel(torch.nn.Module):
    """A Hugging Face model behind vLLM's `load_weights(weights=...)`, under names of its own."""

    def __init__(self, hf):
        super().__init__()
        self.inner = hf

    def load_weights(self, weights):
        self.inner.load_state_dict(dict(weights))


def rpcs(method):
    return [c for c in FakeVLLM.calls if c[0] == "/collective_rpc" and c[1]["method"] == method]


@pytest.fixture
def server():
    FakeVLLM.calls, FakeVLLM.dev_mode, FakeVLLM.skip_loads, FakeVLLM.model = [], True, False, None
    tok = char_tokenizer()
    FakeVLLM.answer = tok.encode("42", add_special_tokens=False) + [tok.eos_token_id]
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), FakeVLLM)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_server_mode_samples_token_ids_with_logprobs(server, tmp_path):
    tok = char_tokenizer()
    s = VLLMSampler("policy", tok, options=VLLMSection(mode="server", url=server, sync_dir=str(tmp_path)))
    out = s.sample([[5, 6], [7]], SamplingParams(max_new_tokens=2, temperature=1.0, top_k=0))
    assert [o.ids for o in out] == [FakeVLLM.answer[:2]] * 2
    assert all(o.logprobs == [-0.5, -0.5] and o.truncated for o in out)
    path, body = FakeVLLM.calls[-1]
    assert path == "/v1/completions" and body["prompt"] == [[5, 6], [7]] and body["top_k"] == -1
    assert body["logprobs"] == 0 and body["return_tokens_as_token_ids"] and "seed" not in body
    full = s.sample([[5]], SamplingParams(max_new_tokens=8))
    assert full[0].ids == FakeVLLM.answer and not full[0].truncated


def test_server_mode_weight_sync_writes_and_loads_the_weights(server, tmp_path):
    s = VLLMSampler("policy", char_tokenizer(), options=VLLMSection(mode="server", url=server, sync_dir=str(tmp_path)))
    model = tiny_model("tiny-xs", seed=3)
    s.sync_weights(model, version=4)
    (p1, b1, weights), (p2, _), (p3, b3) = FakeVLLM.calls[-3:]
    assert p1 == "/collective_rpc" and b1["method"] == "tempering_load_file" and p2 == "/reset_prefix_cache"
    assert p3 == "/collective_rpc" and b3["method"] == "tempering_fingerprint" and s.sync_check.verified == 1
    want = model.state_dict()
    assert set(weights) == set(want)
    assert all(torch.equal(weights[k], want[k]) for k in want)
    assert [p.name for p in tmp_path.iterdir()] == ["policy.safetensors"]  # no temporary file left
    FakeVLLM.dev_mode = False
    with pytest.raises(UserError, match="VLLM_SERVER_DEV_MODE=1"):
        s.sync_weights(model)


def test_a_sync_the_server_silently_skipped_stops_naming_both_versions(server, tmp_path):
    s = VLLMSampler("policy", char_tokenizer(), options=VLLMSection(mode="server", url=server, sync_dir=str(tmp_path)))
    start, trained = tiny_model("tiny-xs", seed=3), tiny_model("tiny-xs", seed=4)
    s.sync_weights(start, version=0)
    FakeVLLM.skip_loads = True  # the server answers the load and keeps what it had
    with pytest.raises(SyncError) as e:
        s.sync_weights(trained, version=1)
    msg = str(e.value)
    assert "weight sync to the vLLM server at http://127.0.0.1" in msg and "\n" not in msg
    assert "it holds the weights of update 0" in msg and "not the trainer's update 1" in msg and "--resume" in msg
    assert s.sync_check.verified == 1


def test_a_server_that_dies_or_hangs_mid_request_is_a_clear_error(tmp_path):
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"

    def serve(hang, done):  # accept one request, then hang up (a killed server) or never answer
        conn, _ = listener.accept()
        conn.recv(65536)
        if hang:
            done.wait()
        conn.close()

    for hang, want in [(False, "cannot reach the vLLM server"), (True, "did not answer /v1/models within")]:
        done = threading.Event()
        t = threading.Thread(target=serve, args=(hang, done), daemon=True)
        t.start()
        with pytest.raises(UserError, match=want) as e:
            VLLMSampler("policy", char_tokenizer(), options=VLLMSection(mode="server", url=url, timeout_s=1))
        assert "--resume" in str(e.value)
        done.set()
        t.join()
    listener.close()


def test_unreachable_server_says_what_to_do(tmp_path):
    with pytest.raises(UserError, match="cannot reach the vLLM server at http://127.0.0.1:9"):
        VLLMSampler(
            "policy", char_tokenizer(), options=VLLMSection(mode="server", url="http://127.0.0.1:9", timeout_s=2)
        )


def test_the_recipe_trains_through_the_server_with_rollout_correction(server, tmp_path):
    import asyncio

    from tempering.config import build
    from tempering.methods.rl import TrainConfig

    cfg = build(
        TrainConfig,
        {
            "model": {"name": "tiny-xs"},
            "task": {
                "family": "arithmetic",
                "args": {"min_value": 0, "max_value": 30},
                "train_size": 20,
                "heldout_size": 4,
            },
            "rollout": {
                "group_size": 2,
                "prompts_per_step": 2,
                "max_new_tokens": 4,
                "backend": "vllm",
                "vllm": {"mode": "server", "url": server, "sync_dir": str(tmp_path / "sync")},
            },
            "loss": {"rollout_correction": "tis"},
            "run": {"steps": 1, "out_dir": str(tmp_path / "run"), "progress": False, "tensorboard": False},
        },
    )
    t = trainer("train", cfg)
    assert t.sampler.syncs == 1  # the server got the trainer's starting weights
    r = asyncio.run(t.step())
    assert t.sampler.syncs == 2  # ... and the updated ones
    # the scripted server's log-probs (-0.5) are not the tiny model's: a large, measured mismatch
    assert r.metrics["rollout/mismatch_kl"] > 0.05 and 0 < r.metrics["rollout/mean_weight"] <= 2.0


def test_async_rollouts_load_each_batchs_weights_into_the_server_and_evaluate_on_current_ones(server, tmp_path):
    import asyncio

    cfg = {
        "model": {"name": "tiny-xs"},
        "task": {
            "family": "arithmetic",
            "args": {"min_value": 0, "max_value": 30},
            "train_size": 20,
            "heldout_size": 2,
        },
        "rollout": {
            "group_size": 2,
            "prompts_per_step": 2,
            "max_new_tokens": 4,
            "backend": "vllm",
            "vllm": {"mode": "server", "url": server, "sync_dir": str(tmp_path / "sync")},
            "async_steps": 1,
        },
        "loss": {"rollout_correction": "tis"},
        "run": {"steps": 3, "eval_every": 0, "eval_k": 1, "out_dir": str(tmp_path / "run"), "progress": False},
    }
    t = trainer("train", cfg)
    assert t.rollout_sampler is t.sampler and t.sampler.syncs == 1  # one engine, shared; the starting weights
    metrics = [asyncio.run(t.step()).metrics for _ in range(3)]
    assert [m["async/staleness"] for m in metrics] == [0, 1, 1]
    # the trainer never pushed weights during the run: the pipeline loaded update 0 (batches 1, 2) and 1 (batch 3)
    assert t.sampler.syncs == 3 and t.pipeline.held == 1
    assert len(rpcs("tempering_load_file")) == len(rpcs("tempering_fingerprint")) == 3
    asyncio.run(t.evaluate(2))  # step 3 is the last: a drain point, so the engine gets the current weights
    assert t.sampler.syncs == 4 and t.pipeline.held == 3
    t.close()


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without a GPU")
def test_vllm_backend_on_a_machine_without_gpu_is_refused(tmp_path):
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "tempering.cli",
            "train",
            "rollout.backend=vllm",
            "run.steps=1",
            f"run.out_dir={tmp_path}",
            "model.name=tiny-xs",
        ],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 2
    assert "rollout.backend=vllm needs a CUDA GPU" in res.stderr and "rollout.backend=hf" in res.stderr
