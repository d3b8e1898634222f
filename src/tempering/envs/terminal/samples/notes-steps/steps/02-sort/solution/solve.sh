#!/bin/bash
cd /app && sort notes.txt > sorted.txt
