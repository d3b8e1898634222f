#!/bin/bash
apt-get update
apt-get install -y curl

curl -LsSf https://astral.sh/uv/0.7.13/install.sh | sh
source $HOME/.local/bin/env

uv venv .tbench-testing
source .tbench-testing/bin/activate
uv pip install pytest==8.4.1

mkdir -p /logs/verifier
if uv run pytest /tests/test_outputs.py -rA; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
