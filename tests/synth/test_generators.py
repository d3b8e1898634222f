"""The LLM generator against a local HTTP server speaking the chat-completions protocol (a real client
over a real socket, scripted answers), through the whole loop with gold verification in the sandbox."""

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tempering.synth.generators import ChatClient, ChatConfig, EndpointError, LLMGenerator, Request, parse_bundle_answer
from tempering.synth.loop import BundleChecker, SynthConfig, synthesize
from tempering.synth.scoring import Action
from tempering.synth.verify import SandboxVerifier


class ScriptedServer:
    """POST /v1/chat/completions answers the next scripted (status, content, usage) in order."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.requests = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
                status, content, usage = outer.answers.pop(0) if outer.answers else (500, "script exhausted", None)
                if status != 200:
                    self.send_response(status)
                    self.end_headers()
                    self.wfile.write(content.encode())
                    return
                payload = {"choices": [{"message": {"role": "assistant", "content": content}}]}
                if usage is not None:
                    payload["usage"] = usage
                data = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    servers = []

    def start(answers):
        servers.append(ScriptedServer(answers))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


USAGE = {"prompt_tokens": 900, "completion_tokens": 100, "total_tokens": 1000}


def _answer(seeds, k=0, action="increase/in_depth"):
    """A correct bundle for seed k, as the generator would write it (from the built-in mutator)."""
    child = seeds[k].mutate(Action.parse(action), salt=7).bundle
    return json.dumps(child.to_json())


def test_client_sends_the_protocol_and_reads_usage(server, monkeypatch):
    srv = server([(200, "hello", USAGE), (200, "no usage", None)])
    monkeypatch.setenv("TEST_KEY", "sk-123")
    client = ChatClient(ChatConfig(base_url=srv.url, model="m1", api_key_env="TEST_KEY", json_mode=True))
    assert client.complete([{"role": "user", "content": "hi"}]) == ("hello", 1000)
    assert client.complete([{"role": "user", "content": "hi"}]) == ("no usage", None)
    req = srv.requests[0]
    assert req["path"] == "/v1/chat/completions" and req["model"] == "m1" and req["auth"] == "Bearer sk-123"
    assert req["messages"] == [{"role": "user", "content": "hi"}] and req["response_format"] == {"type": "json_object"}


def test_client_errors_are_clear(server):
    srv = server([(401, "denied", None), (503, "busy", None), (200, "ok", USAGE)])
    client = ChatClient(ChatConfig(base_url=srv.url, api_key_env="NO_SUCH_KEY_VAR", retries=1))
    with pytest.raises(EndpointError, match=r"HTTP 401.*\$NO_SUCH_KEY_VAR"):
        client.complete([{"role": "user", "content": "x"}])
    assert client.complete([{"role": "user", "content": "x"}])[0] == "ok"  # 503 is retried
    srv.close()
    with pytest.raises(EndpointError, match="cannot reach the generator endpoint"):
        ChatClient(ChatConfig(base_url=srv.url, retries=0, timeout_s=5)).complete([{"role": "user", "content": "x"}])


def test_answers_in_fences_and_prose_parse(seeds):
    body = _answer(seeds)
    assert parse_bundle_answer(f"Here it is:\n```json\n{body}\n```\nDone.").name == json.loads(body)["task_name"]
    with pytest.raises(ValueError, match="not one JSON object"):
        parse_bundle_answer('{"task_name": "x", ')


def test_prompt_states_the_action_contract_and_rules(seeds):
    gen = LLMGenerator(ChatConfig())
    seed = seeds[1]
    action = Action.parse("reduce/in_breadth")
    text = gen.prompt(Request(seed, action, 0.2, 0.3625, 0.82, seed.contract(action)))
    for piece in ("reduce/in_breadth", "0.200", "0.362", "D, E, I, S, T", "REWARD_FILE", seed.name, "aggregation"):
        assert piece in text


def test_loop_repairs_malformed_and_incomplete_answers_then_accepts(server, seeds, sandbox):
    incomplete = json.loads(_answer(seeds))
    del incomplete["files"]["tests/test.sh"]
    srv = server(
        [
            (200, 'Sure! {"task_name": broken', USAGE),  # not JSON -> repair 1
            (200, json.dumps(incomplete), USAGE),  # misses tests/test.sh -> repair 2
            (200, _answer(seeds), USAGE),  # good
        ]
    )
    gen = LLMGenerator(ChatConfig(base_url=srv.url))
    cfg = SynthConfig(target=1, repairs=2)
    report = asyncio.run(
        synthesize([seeds[0]], {seeds[0].name: 0.75}, gen, BundleChecker(SandboxVerifier(sandbox)), cfg)
    )
    assert [e["stage"] for e in report.events] == ["format", "static", "accepted"]
    assert len(report.accepted) == 1 and report.accepted[0].attempts == 3 and report.accepted[0].tokens == 3000
    assert report.summary()["attempts_per_accepted"] == 3 and report.summary()["tokens_per_accepted"] == 3000
    repair = srv.requests[1]["messages"]
    assert [m["role"] for m in repair] == ["user", "assistant", "user"]
    assert "broken" in repair[1]["content"] and "not one JSON object" in repair[2]["content"]
    assert "no tests/test.sh" in srv.requests[2]["messages"][2]["content"]
    assert report.accepted[0].candidate.bundle.metadata["parent"] == seeds[0].name


def test_loop_gives_up_after_k_repairs_then_tries_the_next_best_action(server, seeds, sandbox):
    srv = server([(200, "not json", None)] * 6)
    gen = LLMGenerator(ChatConfig(base_url=srv.url))
    cfg = SynthConfig(target=1, repairs=2, fallback_actions=1, max_rounds=1)
    report = asyncio.run(
        synthesize([seeds[0]], {seeds[0].name: 0.75}, gen, BundleChecker(SandboxVerifier(sandbox)), cfg)
    )
    assert report.accepted == [] and report.attempts == 6
    assert [e["action"] for e in report.events] == ["increase/in_depth"] * 3 + ["increase/in_breadth"] * 3
    assert report.tokens_estimated and report.tokens > 0 and report.summary()["attempts_per_accepted"] is None
