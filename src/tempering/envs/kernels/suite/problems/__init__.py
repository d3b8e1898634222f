"""Built-in problems (KernelBench format: `Model`, `get_inputs`, `get_init_inputs`)."""
