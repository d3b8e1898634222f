#!/bin/bash
mkdir -p /logs/verifier
python3 - <<'PY'
try:
    ok = open("/app/squares.txt").read().split() == [str(i * i) for i in range(1, 11)]
except OSError:
    ok = False
open("/logs/verifier/reward.txt", "w").write("1" if ok else "0")
PY
