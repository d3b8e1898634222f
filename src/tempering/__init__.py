"""tempering: verifier-grounded RL and on-policy distillation for language models."""

__version__ = "0.1.0"
