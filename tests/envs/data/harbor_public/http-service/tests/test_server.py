import json
import urllib.request

BASE = "http://127.0.0.1:8123"

with urllib.request.urlopen(BASE + "/health", timeout=5) as r:
    assert r.status == 200 and r.read() == b"ok", "GET /health must answer ok"
with urllib.request.urlopen(BASE + "/total", timeout=5) as r:
    got = json.loads(r.read())
assert got == {"total": 100}, f"GET /total answered {got}, expected {{'total': 100}}"
print("server answers")
