"""An OpenEnv (openenv-core 0.3.0) environment in the package's own form: guess a seeded number in
three tries, scored by a Rubric."""

import random
import sys

from openenv.core import Action, Environment, Observation, State
from openenv.core.rubrics import Rubric


class GuessAction(Action):
    guess: str


class GuessObservation(Observation):
    message: str


class Closeness(Rubric):
    def forward(self, action, observation):
        return observation.metadata["closeness"]


class GuessEnv(Environment[GuessAction, GuessObservation, State]):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, top: int = 9, turns: int = 3):
        super().__init__(rubric=Closeness())
        self.top, self.turns = top, turns
        self._state = State()

    def reset(self, seed=None, episode_id=None, **kwargs):
        self._reset_rubric()
        self.target = random.Random(seed).randint(0, self.top)
        self._state = State(episode_id=episode_id, step_count=0)
        return GuessObservation(message=f"guess a number from 0 to {self.top}")

    def step(self, action, timeout_s=None, **kwargs):
        self._state.step_count += 1
        try:
            g = int(action.guess)
        except ValueError:
            g = None
        close = 0.0 if g is None else max(0.0, 1 - abs(g - self.target) / (self.top + 1))
        word = "not a number" if g is None else "higher" if g < self.target else "lower" if g > self.target else "yes"
        obs = GuessObservation(
            message=f"{word} (episode {self._state.episode_id})",
            done=g == self.target or self._state.step_count >= self.turns,
            metadata={"closeness": close},
        )
        obs.reward = self._apply_rubric(action, obs)
        return obs

    @property
    def state(self):
        return self._state


if __name__ == "__main__":  # python oe_guess.py PORT: the package's own server on 127.0.0.1
    import uvicorn
    from openenv.core import create_app

    app = create_app(GuessEnv, GuessAction, GuessObservation, max_concurrent_envs=64)
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="error")
