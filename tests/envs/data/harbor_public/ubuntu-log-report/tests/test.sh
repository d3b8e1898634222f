#!/bin/bash
mkdir -p /logs/verifier
expected=$'200 3\n404 1\n500 1'
if [ -f /app/report.txt ] && [ "$(cat /app/report.txt)" = "$expected" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo "report.txt: $(cat /app/report.txt 2>&1)"
  echo 0 > /logs/verifier/reward.txt
fi
