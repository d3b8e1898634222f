#!/bin/bash
mkdir -p /logs/verifier
cd /tests && python3 -c 'from check import check; check("/app/sorted.txt", ["buy milk", "call bob", "fix bike"])'
