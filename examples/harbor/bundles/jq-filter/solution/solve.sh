#!/bin/bash
cd /app && jq -r ".[] | select(.active) | .name" users.json > active.txt
