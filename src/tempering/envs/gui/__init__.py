"""GUI environments with multi-solution annotations.

- Offline apps (`GuiFamily`, `GuiEnv`): generated screens as accessibility trees, multi-step tasks,
  every valid action at every state, and the subtask plan; deterministic from a seed.
- MiniWoB++ in headless Chromium (`tempering.envs.gui.miniwob`, extra `gui`): real pages, same text
  form, same action format, MiniWoB's reward.
- The data pipeline (`dataset`), scripted and model agents (`agents`), metrics (`metrics`), plan
  judges (`judge`). Rewards and guidance are pure functions in `tempering.algos.litegui`.

Only the action format and screens are imported here (the reward functions import them too).
"""

from tempering.envs.gui.action import Action, Parsed, format_output, parse_output
from tempering.envs.gui.screen import Element, Screen

__all__ = ["Action", "Element", "Parsed", "Screen", "format_output", "parse_output"]
