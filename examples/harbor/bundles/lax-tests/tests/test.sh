#!/bin/bash
# Too lax: it passes whatever the agent did, so gold verification refuses the task.
mkdir -p /logs/verifier
echo 1 > /logs/verifier/reward.txt
