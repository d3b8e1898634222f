#!/bin/bash
cd /app && sed "s/{name}/$GREETING_NAME/" templates/greeting.txt > out/greeting.txt
