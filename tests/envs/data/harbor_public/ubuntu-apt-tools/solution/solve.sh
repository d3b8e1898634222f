#!/bin/bash
asciinema rec -c 'ls /app' /app/session.cast
