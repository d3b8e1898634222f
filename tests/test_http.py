"""The one HTTP client: answers, retries of transient statuses only, and each kind of failure, against a
real local server."""

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tempering.http import ServerError, request_json

SEEN: list[tuple[str, str, dict, str | None]] = []
FLAKY = {"left": 0}
RELEASE = threading.Event()  # lets /hang go when the tests are done


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _answer(self, code: int, raw: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self):
        self._route(None)

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        self._route(json.loads(self.rfile.read(n)))

    def _route(self, body):
        SEEN.append((self.command, self.path, body, self.headers.get("Authorization")))
        if self.path == "/echo":
            self._answer(200, json.dumps({"got": body}).encode())
        elif self.path == "/empty":
            self._answer(200, b"")
        elif self.path == "/flaky":  # 503 until `left` runs out
            if FLAKY["left"] > 0:
                FLAKY["left"] -= 1
                self._answer(503, b"busy")
            else:
                self._answer(200, b'{"ok": true}')
        elif self.path == "/refuse":
            self._answer(401, b"no key")
        elif self.path == "/text":
            self._answer(200, b"<html>hello</html>")
        elif self.path == "/hang":  # answers only after its client gave up: writing to it must fail
            RELEASE.wait(30)
            try:
                self._answer(200, b"{}")
            except (BrokenPipeError, ConnectionResetError):
                pass


@pytest.fixture(scope="module")
def url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = False  # server_close() joins the handlers: none outlives these tests
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    RELEASE.set()
    server.shutdown()
    server.server_close()


def test_a_json_answer_with_the_key_as_bearer(url):
    SEEN.clear()
    assert request_json("POST", url + "/echo", {"a": [1, 2]}, timeout_s=5, api_key="k") == {"got": {"a": [1, 2]}}
    assert SEEN == [("POST", "/echo", {"a": [1, 2]}, "Bearer k")]
    assert request_json("GET", url + "/empty", timeout_s=5) == {}


def test_transient_statuses_are_retried_and_the_rest_are_not(url):
    FLAKY["left"] = 2
    SEEN.clear()
    assert request_json("GET", url + "/flaky", timeout_s=5, retries=2, backoff_s=0.01) == {"ok": True}
    assert len(SEEN) == 3
    FLAKY["left"] = 2
    with pytest.raises(ServerError) as e:
        request_json("GET", url + "/flaky", timeout_s=5, retries=1, backoff_s=0.01)
    assert (e.value.kind, e.value.status, e.value.body) == ("status", 503, b"busy")
    SEEN.clear()
    with pytest.raises(ServerError) as e:
        request_json("GET", url + "/refuse", timeout_s=5, retries=3, backoff_s=0.01)
    assert (e.value.kind, e.value.status, len(SEEN)) == ("status", 401, 1)  # a refusal is never retried


def test_each_failure_has_its_kind(url):
    with pytest.raises(ServerError) as e:
        request_json("GET", url + "/text", timeout_s=5)
    assert e.value.kind == "not_json" and b"hello" in e.value.body
    with pytest.raises(ServerError) as e:
        request_json("GET", url + "/hang", timeout_s=0.3)
    assert e.value.kind == "timeout"
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ServerError) as e:
        request_json("GET", f"http://127.0.0.1:{port}/", timeout_s=5)
    assert e.value.kind == "unreachable"
