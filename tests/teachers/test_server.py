"""The vLLM-server teacher against a local server that speaks the completions protocol with
`prompt_logprobs`; its answers come from a tiny model, so they can be checked against in-process scores."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch

from tempering.errors import UserError
from tempering.teachers import HFTeacher, ServerTeacher
from tempering.teachers.base import pad_right


class Scripted(BaseHTTPRequestHandler):
    model = None
    bodies: list = []
    mode = "ok"

    def log_message(self, *a):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Scripted.bodies.append((self.path, body))
        if Scripted.mode == "error":
            self.send_response(500)
            self.end_headers()
            self.wfile.write(b"out of memory")
            return
        choices = []
        for i, ids in enumerate(body["prompt"]):
            entries = [None]
            if Scripted.mode != "no_logprobs":
                with torch.no_grad():
                    logp = Scripted.model(input_ids=torch.tensor([ids])).logits[0].float().log_softmax(-1)
                for pos in range(1, len(ids)):  # like vLLM: the actual token plus the top-N, keyed by id
                    top = logp[pos - 1].topk(body["prompt_logprobs"])
                    e = {
                        str(t): {"logprob": v, "rank": r + 1, "decoded_token": "?"}
                        for r, (t, v) in enumerate(zip(top.indices.tolist(), top.values.tolist()))
                    }
                    e[str(ids[pos])] = {"logprob": float(logp[pos - 1, ids[pos]]), "rank": 0, "decoded_token": "?"}
                    entries.append(e)
            choices.append(
                {"index": i, "text": "x", "prompt_logprobs": None if Scripted.mode == "no_logprobs" else entries}
            )
        out = json.dumps({"id": "cmpl", "object": "text_completion", "choices": choices[::-1]}).encode()  # any order
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


@pytest.fixture
def server(tiny):
    Scripted.model, Scripted.bodies, Scripted.mode = tiny[0], [], "ok"
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def _requests():
    g = torch.Generator().manual_seed(0)
    prompts, resps = [], []
    for i in range(5):
        p = torch.randint(4, 90, (3 + i % 3,), generator=g).tolist()
        for j in range(2):
            prompts.append(p)
            resps.append(torch.randint(4, 90, (2 + (i + j) % 4,), generator=g).tolist())
    return prompts, resps


def test_server_scores_match_the_in_process_teacher(tiny, server):
    model, tok = tiny
    prompts, resps = _requests()
    local = HFTeacher(model, tok)
    cand = local.score(prompts, resps, top_k=12).top_ids_BCK  # 12 candidates, of which the server returns the top 8
    want = local.score(prompts, resps, cand, top_k=4)
    got = ServerTeacher(server + "/v1", "teacher", tok, top_n=8, batch_size=3, concurrency=2).score(
        prompts, resps, cand, top_k=4
    )
    m = got.mask_BC.bool()
    torch.testing.assert_close(got.token_logp_BC, want.token_logp_BC, atol=1e-5, rtol=0)
    torch.testing.assert_close(got.top_logp_BCK[m], want.top_logp_BCK[m], atol=1e-5, rtol=0)
    assert torch.equal(got.top_ids_BCK[m], want.top_ids_BCK[m])
    # the server's top-8 (and the actual token) are exact; other candidates get the 8th log-prob as an upper bound
    actual = pad_right(resps)[0][m]
    exact = torch.cat([torch.ones_like(cand[m][:, :8], dtype=torch.bool), cand[m][:, 8:] == actual[:, None]], 1)
    assert torch.equal(got.cand_found_BCK[m].bool(), exact) and not exact.all()
    torch.testing.assert_close(got.cand_logp_BCK[m][exact], want.cand_logp_BCK[m][exact], atol=1e-5, rtol=0)
    eighth = want.cand_logp_BCK[m][:, 7:8].expand(-1, 12)  # candidates are the local top-12, in order
    torch.testing.assert_close(got.cand_logp_BCK[m][~exact], eighth[~exact], atol=1e-5, rtol=0)
    assert (got.cand_logp_BCK[m][~exact] >= want.cand_logp_BCK[m][~exact]).all()
    # token ids go out as the prompt (nothing re-tokenised), 3 sequences per request
    assert len(Scripted.bodies) == 4
    path, body = Scripted.bodies[0]
    assert path == "/v1/completions" and body["prompt_logprobs"] == 8 and body["max_tokens"] == 1
    assert all(isinstance(x, int) for x in body["prompt"][0])


def test_server_errors_are_clear(tiny, server):
    _, tok = tiny
    prompts, resps = _requests()
    t = ServerTeacher(server, "teacher", tok, top_n=4)
    with pytest.raises(UserError, match="in-process teacher"):
        t.score(prompts, resps, full=True)
    with pytest.raises(UserError, match="raise teacher.top_n"):
        t.score(prompts, resps, top_k=5)
    Scripted.mode = "no_logprobs"
    with pytest.raises(UserError, match="no prompt_logprobs"):
        t.score(prompts, resps)
    Scripted.mode = "error"
    with pytest.raises(UserError, match="HTTP 500: out of memory"):
        t.score(prompts, resps)
    with pytest.raises(UserError, match="could not reach"):
        ServerTeacher("http://127.0.0.1:9", "teacher", tok, timeout_s=5).score(prompts, resps)
