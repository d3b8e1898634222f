#!/bin/bash
mkdir -p /app && python3 -c "print(*[i * i for i in range(1, 11)], sep=chr(10))" > /app/squares.txt
