"""The sums taskset as a bare taskset package (no load_environment): the package's loader builds it
from its config fields, here with a system prompt, so prompts are chat messages."""

from vf_sums import SumTaskset

__all__ = ["SumTaskset"]
