"""Stand-ins for a vLLM server and a teacher server, for the fault trials of benchmarks/faults.py: the
same OpenAI-compatible endpoints tempering calls, answered by a tiny model on the CPU, deterministic (greedy
completions), so that a run resumed after a server died goes on exactly like an uninterrupted one.

    python benchmarks/fault_servers.py MODEL_DIR PORT LOG

- POST /v1/completions: with `prompt_logprobs` (a teacher's scoring) the log-prob
  of every prompt token and the model's top-N at each position; otherwise a greedy completion of each
  prompt (token ids, their log-probs) up to `max_tokens` or the end-of-sequence token.
- POST /collective_rpc: `tempering_load_file` (loads the weight file the trainer wrote) and
  `tempering_fingerprint` (the sums of the weights it holds), through tempering's own worker extension.
- GET /v1/models, POST /reset_prefix_cache.

Every request is noted in LOG (one line) before it is answered, so that a trial can kill the server
while a request is in flight (the answer waits `DELAY_S`).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch

DELAY_S = 0.3


def serve(model_dir: str, port: int, log: str) -> None:
    from types import SimpleNamespace

    from tempering.models import load_policy
    from tempering.rollout.sampler import HFSampler, SamplingParams
    from tempering.rollout.vllm_sampler import WeightSync

    torch.set_num_threads(1)
    model, tok = load_policy(model_dir)
    model.eval()
    lock = threading.Lock()

    class Engine(torch.nn.Module):  # vLLM's `load_weights(weights=...)` on the Hugging Face model
        def __init__(self):
            super().__init__()
            self.hf = model

        def load_weights(self, weights):
            model.load_state_dict(dict(weights))

    worker = WeightSync()
    worker.model_runner = SimpleNamespace(model=Engine())

    def prompt_logprobs(ids: list[int], top: int) -> list:
        with torch.no_grad():
            logp = model(input_ids=torch.tensor([ids])).logits[0, :-1].float().log_softmax(-1)
        out: list = [None]
        for t, row in zip(ids[1:], logp):
            best = torch.topk(row, max(top, 1))
            entry = {str(int(i)): {"logprob": float(v)} for v, i in zip(best.values, best.indices)}
            entry[str(t)] = {"logprob": float(row[t])}
            out.append(entry)
        return out

    class Handler(BaseHTTPRequestHandler):
        def _reply(self, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _note(self) -> None:
            with open(log, "a") as f:
                f.write(f"{time.time():.3f} {self.path}\n")

        def do_GET(self):
            self._note()
            self._reply({"data": [{"id": model_dir}]})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
            self._note()
            time.sleep(DELAY_S)
            with lock:
                if self.path == "/collective_rpc":
                    return self._reply({"results": [getattr(worker, body["method"])(*body.get("args", []))]})
                if self.path != "/v1/completions":
                    return self._reply({})
                if body.get("prompt_logprobs") is not None:
                    choices = [
                        {"index": i, "prompt_logprobs": prompt_logprobs(p, body["prompt_logprobs"])}
                        for i, p in enumerate(body["prompt"])
                    ]
                    return self._reply({"choices": choices})
                params = SamplingParams(max_new_tokens=body["max_tokens"], temperature=0.0)
                samples = HFSampler(model, tok).sample(body["prompt"], params)
                with torch.no_grad():  # greedy: the log-prob each token has under the model
                    choices = []
                    for i, (p, s) in enumerate(zip(body["prompt"], samples)):
                        ids = torch.tensor([p + s.ids])
                        logp = model(input_ids=ids).logits[0, len(p) - 1 : -1].float().log_softmax(-1)
                        lps = [float(logp[j, t]) for j, t in enumerate(s.ids)]
                        choices.append(
                            {
                                "index": i,
                                "finish_reason": "length" if s.truncated else "stop",
                                "logprobs": {"tokens": [f"token_id:{t}" for t in s.ids], "token_logprobs": lps},
                            }
                        )
                return self._reply({"choices": choices})

        def log_message(self, *a):
            pass

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]), sys.argv[3])
