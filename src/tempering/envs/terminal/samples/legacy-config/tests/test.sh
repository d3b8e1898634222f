#!/bin/bash
mkdir -p /logs/verifier
if [ -d /app/out ] && [ "$(cat /app/out/greeting.txt 2>/dev/null)" = "Hello, Ada!" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
