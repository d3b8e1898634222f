"""Credit functions and losses: pure tensor functions, no model and no I/O."""
