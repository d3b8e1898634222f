#!/bin/bash
mkdir -p /logs/verifier
cd /tests && python3 -c 'from check import check; check("/app/notes.txt", ["fix bike", "buy milk", "call bob"])'
