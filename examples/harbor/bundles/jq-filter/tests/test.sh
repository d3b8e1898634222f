#!/bin/bash
mkdir -p /logs/verifier
if [ "$(cat /app/active.txt 2>/dev/null)" = "$(printf 'ada\ncy')" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
