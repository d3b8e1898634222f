"""Checks /app/totals.json against the revenue of each region in the fixture."""

import json
import sys

EXPECTED = {"north": 345.47, "south": 110.99, "east": 182.0}

try:
    got = json.load(open("/app/totals.json"))
except (OSError, ValueError) as e:
    sys.exit(f"/app/totals.json is missing or not JSON: {e}")
if set(got) != set(EXPECTED):
    sys.exit(f"regions {sorted(got)} != {sorted(EXPECTED)}")
for region, value in EXPECTED.items():
    if not abs(float(got[region]) - value) <= 0.005:  # NaN compares false either way: it must fail here
        sys.exit(f"{region}: {got[region]} != {value}")
print("ok")
