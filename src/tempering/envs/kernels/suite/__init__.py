"""Built-in CPU-sized problem suite: `problems/` in KernelBench format, one reference submission each in `solutions/`."""
