#!/bin/bash
set -e
cat > /app/server.py <<'PY'
import csv
import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/health":
            body, kind = b"ok", "text/plain"
        elif self.path == "/total":
            with open("/app/orders.csv") as f:
                total = sum(int(r["amount"]) for r in csv.DictReader(f))
            body, kind = json.dumps({"total": total}).encode(), "application/json"
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


ThreadingHTTPServer(("127.0.0.1", 8123), Handler).serve_forever()
PY
nohup python3 /app/server.py > /tmp/server.log 2>&1 &
for _ in $(seq 50); do
  python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8123/health', timeout=1)" 2>/dev/null && exit 0
  sleep 0.1
done
echo "the server did not come up" >&2
exit 1
