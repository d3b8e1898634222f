#!/bin/bash
cat > /app/stats.py <<'PY'
def summary(path):
    with open(path) as f:
        values = [int(line) for line in f if line.strip()]
    return {"count": len(values), "mean": sum(values) / len(values), "max": max(values)}
PY
