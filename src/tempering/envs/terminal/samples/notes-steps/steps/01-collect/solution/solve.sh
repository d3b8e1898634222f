#!/bin/bash
cd /app && cat inbox/*.txt > notes.txt
