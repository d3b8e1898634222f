"""The LLM plan judge against a local OpenAI-compatible server with scripted answers."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tempering.envs.gui.judge import JudgeConfig, LLMJudge, make_judge
from tempering.envs.gui.reward import plan_match
from tempering.errors import UserError


class Scripted(BaseHTTPRequestHandler):
    answers: list = []
    requests: list = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Scripted.requests.append((self.path, self.headers.get("Authorization"), body))
        status, content = Scripted.answers.pop(0)
        if status != 200:
            self.send_response(status)
            self.end_headers()
            return
        payload = (
            content
            if isinstance(content, bytes)
            else json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()
        )
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    Scripted.answers, Scripted.requests = [], []
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()
    srv.server_close()


PRED, REF = ["enter Name Ana"], ["enter Name Ana", "submit"]  # rule-based score 0.5


def test_scripted_answers_including_garbage(server):
    Scripted.answers = [
        (200, "0.8"),
        (200, "Score: 1"),
        (200, "0.75"),
        (200, "no idea"),
        (200, b"not json"),
        (500, None),
        (200, None),
    ]
    judge = LLMJudge(server, "tiny-judge", api_key="k", timeout_s=5)
    scores = [judge(PRED, REF, "Sign up: Name Ana") for _ in range(7)]
    # three usable answers (0.75 snaps to 0.8), then four fallbacks to the rule-based 0.5
    assert scores == [0.8, 1.0, 0.8, 0.5, 0.5, 0.5, 0.5]
    assert judge.calls == 7 and judge.fallbacks == 4
    path, auth, body = Scripted.requests[0]
    assert path == "/v1/chat/completions" and auth == "Bearer k" and body["model"] == "tiny-judge"
    prompt = body["messages"][0]["content"]
    assert "Sign up: Name Ana" in prompt and "enter Name Ana; submit" in prompt


def test_client_errors_and_unreachable_servers_are_user_errors(server):
    Scripted.answers = [(404, None)]
    with pytest.raises(UserError, match="answered HTTP 404"):
        LLMJudge(server, "m", timeout_s=5)(PRED, REF)
    dead = LLMJudge("http://127.0.0.1:9/v1", "m", timeout_s=2)
    with pytest.raises(UserError, match="cannot be reached.*judge.kind=rule"):
        dead(PRED, REF)


def test_make_judge():
    assert make_judge() is plan_match
    assert isinstance(make_judge(JudgeConfig(kind="llm", base_url="http://127.0.0.1:1/v1")), LLMJudge)
    with pytest.raises(UserError, match="judge.kind"):
        make_judge(JudgeConfig(kind="oracle"))
