"""Services other programs drive over HTTP: `tempering serve tinker`, the Tinker API on tempering's models,
losses and sampler ([docs/tinker.md](../../../docs/tinker.md))."""
