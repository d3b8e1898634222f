"""tempering: verifier-grounded RL and on-policy distillation for language models."""

__version__ = "0.1.0"


def __getattr__(name: str):
    """`tempering.run(method, cfg, ...)` and `tempering.trainer(...)` (`recipes/runner.py`), imported on
    first use so that `import tempering` stays light."""
    if name in ("run", "trainer"):
        from tempering.recipes import runner

        return getattr(runner, name)
    raise AttributeError(f"module 'tempering' has no attribute {name!r}")
