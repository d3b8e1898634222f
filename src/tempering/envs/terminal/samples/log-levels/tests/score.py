"""Prints the rewards as one JSON object; a missing or unreadable report scores 0 everywhere."""

import json
import os

try:
    report = json.load(open(os.environ.get("REPORT", "/app/report.json")))
except (OSError, ValueError):
    report = {}
counts = float(report.get("counts") == {"DEBUG": 1, "INFO": 3, "WARN": 1, "ERROR": 3})
worst = float(report.get("worst_file") == "api.log")
print(json.dumps({"reward": counts * worst, "counts": counts, "worst_file": worst}))
