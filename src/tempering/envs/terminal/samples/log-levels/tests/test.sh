#!/bin/bash
# Two named rewards: `counts` and `worst_file`; `reward` is 1 only when both are right.
mkdir -p /logs/verifier
python3 /tests/score.py > /logs/verifier/reward.json || echo '{"reward": 0, "counts": 0, "worst_file": 0}' > /logs/verifier/reward.json
