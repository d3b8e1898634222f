"""A multi-turn verifiers 0.4.0 environment in the package's own form: its run() plays a guessing
exchange with the one agent seat and records the game's rewards; the sums task adds its own."""

import verifiers.v1 as vf
from vf_sums import SumTaskset


class GuessConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig()
    tries: int = 3


class GuessGame(vf.Env[GuessConfig]):
    async def run(self, task, agents):
        target = int(task.data.answer)
        async with agents.player.interaction(task) as it:
            segment, tries = await it.turn(), 1
            while not segment.terminated and segment.last_reply != task.data.answer and tries < self.config.tries:
                try:
                    hint = "higher" if int(segment.last_reply) < target else "lower"
                except ValueError:
                    hint = "a number, please"
                segment, tries = await it.turn(hint), tries + 1
        it.trace.record_reward("solved", float(segment.last_reply == task.data.answer), 2.0)
        it.trace.record_reward("tries", tries / self.config.tries, -0.5)


__all__ = ["GuessGame", "SumTaskset"]
