#!/bin/bash
set -euo pipefail
cd /app
python3 - <<'PY'
import glob, json, os, re
counts = dict.fromkeys(["DEBUG", "INFO", "WARN", "ERROR"], 0)
errors = {}
for path in sorted(glob.glob("logs/*.log")):
    for line in open(path):
        m = re.match(r"\[(\w+)\]", line)
        if m and m.group(1) in counts:
            counts[m.group(1)] += 1
            if m.group(1) == "ERROR":
                errors[os.path.basename(path)] = errors.get(os.path.basename(path), 0) + 1
json.dump({"counts": counts, "worst_file": max(errors, key=errors.get)}, open("report.json", "w"))
PY
