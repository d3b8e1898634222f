#!/bin/bash
# The tests use only the standard library, so they run without installing pytest.
python3 $TEST_DIR/test_outputs.py
