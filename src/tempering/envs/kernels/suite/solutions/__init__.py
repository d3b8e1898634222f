"""One correct `c`-backend submission (`ModelNew`) per built-in problem, same file name."""
