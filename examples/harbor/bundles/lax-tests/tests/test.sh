#!/bin/bash
# Too lax: it passes whatever the agent did. The static checks refuse it (it never writes 0), and so
# would gold verification (the tests pass before the solution ran).
mkdir -p /logs/verifier
echo 1 > /logs/verifier/reward.txt
