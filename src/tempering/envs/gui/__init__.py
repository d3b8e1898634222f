"""GUI environments with multi-solution annotations.

- Offline apps (`GuiFamily`, `GuiEnv`): generated screens as accessibility trees, multi-step tasks,
  every valid action at every state, and the subtask plan; deterministic from a seed.
- MiniWoB++ in headless Chromium (`tempering.envs.gui.miniwob`, extra `gui`): real pages on a pool of
  browsers (`browser`), same text form, same action format, the task's success reward; a text-only
  oracle (`miniwob_oracle`) checks them.
- The data pipeline (`dataset`), scripted and model agents (`agents`), metrics (`metrics`), plan
  judges (`judge`), LiteGUI's dual-level reward (`reward`) and teacher guidance (`guidance`).

Only the action format and screens are imported here.
"""

from tempering.envs.gui.action import Action, Parsed, format_output, parse_output
from tempering.envs.gui.screen import Element, Screen

__all__ = ["Action", "Element", "Parsed", "Screen", "format_output", "parse_output"]
