#!/bin/bash
mkdir -p /logs/verifier
if head -1 /app/session.cast 2>/dev/null | grep -q '"version"'; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
