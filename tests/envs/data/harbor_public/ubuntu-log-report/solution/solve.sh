#!/bin/bash
awk '{print $4}' /app/access.log | sort | uniq -c | awk '{print $2, $1}' | sort -n > /app/report.txt
